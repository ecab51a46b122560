"""The one atomic-write-under-lock helper: whole files, private from creation, merged writers."""

from __future__ import annotations

import multiprocessing
import os
import stat

from core.state.atomic_files import locked, write_atomically


def _add_one(path_text: str, times: int) -> None:
    from pathlib import Path

    path = Path(path_text)
    for _ in range(times):
        with locked(path):
            value = int(path.read_text()) if path.exists() else 0
            write_atomically(path, str(value + 1))


def test_concurrent_writers_under_the_lock_lose_no_update(tmp_path):
    counter = tmp_path / "counter"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_add_one, args=(str(counter), 50)) for _ in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert counter.read_text() == "150"


def test_new_files_are_private_even_with_an_open_umask(tmp_path):
    old = os.umask(0)
    try:
        write_atomically(tmp_path / "secret", "token")
        write_atomically(tmp_path / "public", "hello", mode=0o644)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "secret").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "public").stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["public", "secret"]  # no temp left


def test_a_symlink_is_written_through_not_replaced(tmp_path):
    real = tmp_path / "real-config"
    real.write_text("old")
    link = tmp_path / "config"
    link.symlink_to(real)
    write_atomically(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("old")
    try:
        write_atomically(path, object())  # not str or bytes: fails before the rename
    except (TypeError, AttributeError):
        pass
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["state.json"]
