"""Links planted in the dataset cache a node shares between workspaces (issue 38 finding 6).

Another workspace's pod can write to the cache (`/datasets/<source>`, one hostPath per node).
The loader used to resolve() the cache directory and write its marker and temporary file
through whatever was there, so a link planted under the next file name made this workspace
write into its own checkpoints (or anything else it can write). Now no link is followed:
a link in place of a cache file is replaced by the real file, a link in place of the cache
directory is refused in one line, and the file a link points at is never touched.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from recipes.config import parse_config
from recipes.data import shared_cache
from recipes.data.c4 import C4Data, build_cache
from recipes.data.shared_cache import CacheRefused

PRECIOUS = b"a checkpoint of the victim workspace"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def _cfg(tmp_path: Path, cache_dir: str = "cache"):
    corpus = tmp_path / "corpus.json"
    if not corpus.exists():
        corpus.write_text("\n".join(json.dumps({"text": "a" * 50}) for _ in range(4)))
    return parse_config({"model": "gpt-neo", "size": "tiny", "steps": 4, "out_dir": str(tmp_path / "run"),
                         "data": {"source": "c4", "batch_size": 2, "seq_len": 16, "path": str(corpus),
                                  "cache_dir": cache_dir}})


def _names(tmp_path: Path) -> list[str]:
    """The file names a run with this config writes into the cache (learned from a scout run)."""
    scout = tmp_path / "scout"
    build_cache(_cfg(tmp_path), 0, 1, scout)
    return sorted(p.name for p in (scout / "cache").iterdir())


def _precious(tmp_path: Path, name: str) -> Path:
    target = tmp_path / "victim-checkpoints" / name
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(PRECIOUS)
    return target


@pytest.mark.parametrize("planted", ["marker", "data", "both"])
def test_a_link_in_place_of_a_cache_file_is_replaced_and_its_target_untouched(tmp_path, planted):
    data_name, marker_name = _names(tmp_path)  # c4-<key>-rank0of1.bin, .json
    cache = tmp_path / "victim" / "cache"
    cache.mkdir(parents=True)
    targets = {}
    for name in {"marker": [marker_name], "data": [data_name], "both": [data_name, marker_name]}[planted]:
        targets[name] = _precious(tmp_path, name)
        (cache / name).symlink_to(targets[name])
    data = C4Data(_cfg(tmp_path), 0, 1, tmp_path / "victim")
    assert set(data.next_batch()["input_ids"].flatten().tolist()) <= {ord("a"), 255}
    assert all(t.read_bytes() == PRECIOUS for t in targets.values())
    assert not any(p.is_symlink() for p in cache.iterdir())
    assert sorted(p.name for p in cache.iterdir()) == [data_name, marker_name]  # no temporary file left


def test_a_dangling_link_in_place_of_the_marker_creates_nothing_where_it_points(tmp_path):
    """A link to a file not there yet (the victim's next checkpoint): the marker was written through it."""
    _, marker_name = _names(tmp_path)
    cache = tmp_path / "victim" / "cache"
    cache.mkdir(parents=True)
    future = tmp_path / "victim-checkpoints" / "step_00000010" / "rank_0.json"
    future.parent.mkdir(parents=True)
    (cache / marker_name).symlink_to(future)
    C4Data(_cfg(tmp_path), 0, 1, tmp_path / "victim")
    assert not future.exists() and not (cache / marker_name).is_symlink()


def test_a_link_at_the_old_predictable_temporary_name_is_never_written_through(tmp_path):
    data_name, _ = _names(tmp_path)
    cache = tmp_path / "victim" / "cache"
    cache.mkdir(parents=True)
    stem = data_name.removesuffix(".bin")
    targets = [_precious(tmp_path, f"t{pid}") for pid in range(1, 4)] + [_precious(tmp_path, "own")]
    for pid, target in zip([1, 2, 3, os.getpid()], targets):
        (cache / f"{stem}.bin.tmp{pid}").symlink_to(target)  # pids in a pod are small and guessable
    C4Data(_cfg(tmp_path), 0, 1, tmp_path / "victim")
    assert all(t.read_bytes() == PRECIOUS for t in targets)


def test_a_temporary_file_is_created_exclusively(tmp_path, monkeypatch):
    """Even a planted link at the exact random name is not opened: O_CREAT|O_EXCL|O_NOFOLLOW."""
    target = _precious(tmp_path, "target")
    folder = tmp_path / "cache"
    folder.mkdir()
    monkeypatch.setattr(shared_cache.secrets, "token_hex", lambda n: "guessed")
    (folder / ".x.bin.tmp-guessed").symlink_to(target)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(FileExistsError):
            shared_cache.new_temp(fd, "x.bin")
    finally:
        os.close(fd)
    assert target.read_bytes() == PRECIOUS


@pytest.mark.parametrize("absolute", [False, True])
def test_a_link_in_place_of_the_cache_directory_is_refused_in_one_line(tmp_path, absolute):
    elsewhere = tmp_path / "victim-checkpoints"
    elsewhere.mkdir()
    (elsewhere / "step_00000004").mkdir()
    before = sorted(p.name for p in elsewhere.rglob("*"))
    mount = tmp_path / "datasets"  # the node's dataset mount; <source> below it is shared
    mount.mkdir()
    (mount / "gpt-neo").symlink_to(elsewhere)
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "cache").symlink_to(elsewhere)
    cache_dir = str(mount / "gpt-neo") if absolute else "cache"
    with pytest.raises(CacheRefused) as refused:
        C4Data(_cfg(tmp_path, cache_dir), 0, 1, tmp_path / "victim")
    message = str(refused.value)
    assert "\n" not in message and "symbolic link" in message and "data.cache_dir" in message
    assert sorted(p.name for p in elsewhere.rglob("*")) == before


def test_a_cached_file_swapped_for_a_link_is_not_read(tmp_path):
    data_file = build_cache(_cfg(tmp_path), 0, 1, tmp_path / "victim")
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\x00" * 64)
    data_file.unlink()
    data_file.symlink_to(secret)  # after the check, before the read
    with pytest.raises(CacheRefused, match="symbolic link"):
        shared_cache.open_file(data_file)
    fifo = data_file.with_name("fifo.bin")
    os.mkfifo(fifo)
    with pytest.raises(CacheRefused, match="not a regular file"):  # and opening it did not hang
        shared_cache.open_file(fifo)
