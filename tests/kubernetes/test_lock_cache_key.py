"""The node's dependency cache is keyed by the image and the whole lock file (issue 41, item 6):
nodes filled on different days share a cache only when they install the same hashed pins, and a
changed lock is a new directory, never an old install reused."""

from __future__ import annotations

import shutil

from core.domain.images import UPSTREAM_IMAGES
from core.kubernetes import recipes_delivery as delivery


def test_a_changed_lock_or_image_is_another_cache(tmp_path, monkeypatch):
    before = delivery.deps_key(UPSTREAM_IMAGES["nvidia"])
    assert delivery.deps_key(UPSTREAM_IMAGES["amd"]) != before
    copy = tmp_path / "recipes"
    copy.mkdir()
    lock = delivery.recipes_root().parent / delivery.LOCK_FILE
    shutil.copy(lock, copy / "requirements.lock")
    monkeypatch.setattr(delivery, "recipes_root", lambda: copy)
    assert delivery.deps_key(UPSTREAM_IMAGES["nvidia"]) == before  # the same bytes: the same key
    (copy / "requirements.lock").write_text(lock.read_text().replace("transformers==", "transformers==0", 1))
    assert delivery.deps_key(UPSTREAM_IMAGES["nvidia"]) != before
