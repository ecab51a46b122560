"""The pure parts: what a model needs, the W&B key format (as wandb itself judges it)."""

from __future__ import annotations

import pytest

from core.requirements import needs
from core.requirements.machine import judge
from core.requirements.wandb_key import base_url, format_problem
from tests.requirements.conftest import facts


@pytest.mark.parametrize("key", [
    "", "abc", "a" * 39, "a" * 40, "local-" + "b" * 40, "local-" + "b" * 39, "x" * 39 + "!",
    "hdr.payload.sig", "wandb_v1_" + "c" * 60, "a b" * 20,
])
def test_the_format_check_agrees_with_wandbs_own(key):
    from wandb.sdk.lib.wbauth.validation import check_api_key  # wandb 0.31's rule

    assert (format_problem(key) is None) == (check_api_key(key) is None)


def test_the_key_is_checked_at_the_server_the_runs_will_log_to(monkeypatch):
    """wandb 0.31 logs to api.forge.coreweave.com unless told otherwise; a check at api.wandb.ai
    could pass where the runs then fail to connect, or the other way round."""
    import wandb

    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    assert base_url() == wandb.Settings().base_url.rstrip("/")
    monkeypatch.setenv("WANDB_BASE_URL", "http://10.0.0.7:8080/")
    assert base_url() == "http://10.0.0.7:8080"  # as wandb.setup() applies it to the runs' settings


def test_imagenet_and_librispeech_want_more_than_250_gb_on_a_gpu_node():
    for model, size, source in (("resnet50", "full", "imagenet"), ("wav2vec2", "base", "librispeech")):
        need = needs.needs_for({"data": {"source": source}}, model, size, 1000, 8, "nvidia", local=False)
        assert need.disk_gb > 250
        assert [f.verdict for f in judge("n", facts(var_lib_free_gb=250.0), need, local=False)][0] == "fail"
    tiny = needs.needs_for({"data": {"source": "synthetic-images"}}, "resnet50", "tiny", 1000, 8, "nvidia", False)
    assert tiny.disk_gb < 15  # the image and logs, no dataset


def test_gpu_memory_is_judged_on_the_smallest_gpu():
    need = needs.needs_for({}, "gpt-neo", "1.3b", 100, 1, "nvidia", local=False)
    assert 20 < need.gpu_memory_gib < 24  # fp32 weights, grads, AdamW moments + 2 GiB
    gpu = [f for f in judge("n", facts(gpu_mb=16384), need, local=False) if f.check == "GPU memory"]
    assert [(f.verdict, f.found) for f in gpu] == [("fail", "16.0 GiB on its smallest GPU")]
