"""The state store: migrations, the built-in cluster, concurrent writers."""

import json
import multiprocessing
import sqlite3
import time

from core.state.cluster_records import list_clusters
from core.state.store import MIGRATIONS, Store


def test_fresh_store_has_schema_version_and_local_cluster(geotrain_home):
    store = Store()
    assert store.schema_version() == len(MIGRATIONS)
    clusters = list_clusters(store)
    assert [c.name for c in clusters] == ["local"]
    assert clusters[0].kind == "local"
    Store()  # opening again migrates nothing and duplicates nothing
    assert len(list_clusters(store)) == 1


def test_failed_transaction_leaves_no_trace(geotrain_home):
    store = Store()
    try:
        with store.write() as conn:
            conn.execute("INSERT INTO settings(key, value) VALUES ('a', '1')")
            raise RuntimeError("crash in the middle")
    except RuntimeError:
        pass
    assert store.get_setting("a") is None


def _writer(home: str, name: str, count: int) -> None:
    import os

    os.environ["GEOTRAIN_HOME"] = home
    store = Store()
    for i in range(count):
        with store.write() as conn:
            conn.execute("INSERT INTO workspaces(id, cluster, spec, status, created_at, updated_at)"
                         " VALUES (?, 'local', '{}', 'PENDING', ?, ?)", (f"{name}-{i}", time.time(), 0))
        with store.read() as conn:
            conn.execute("SELECT COUNT(*) FROM workspaces").fetchone()


def test_two_processes_write_at_once_without_errors_or_lost_rows(geotrain_home):
    Store()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(geotrain_home), f"p{n}", 150)) for n in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    with Store().read() as conn:
        assert conn.execute("SELECT COUNT(*) FROM workspaces").fetchone()[0] == 450


def test_process_killed_mid_write_leaves_a_valid_database(geotrain_home):
    Store()
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=_writer, args=(str(geotrain_home), "k", 100000))
    proc.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.is_alive():  # kill it once it is writing
        with Store().read() as conn:
            if conn.execute("SELECT COUNT(*) FROM workspaces").fetchone()[0] > 10:
                break
        time.sleep(0.05)
    time.sleep(0.2)
    proc.kill()
    proc.join()
    conn = sqlite3.connect(geotrain_home / "state.sqlite3")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    count = conn.execute("SELECT COUNT(*) FROM workspaces").fetchone()[0]
    assert count > 0
    Store().set_setting("after", json.dumps(count))  # still writable
