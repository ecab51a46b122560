"""SQLite state: nodes, clusters, workspaces, with a schema version and migrations.

Each operation opens a short-lived connection in WAL mode with a busy timeout, and
every write runs in one `BEGIN IMMEDIATE` transaction, so the CLI and the app can work
at the same time and a process killed mid-write leaves the database valid.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from core.state import paths
from core.errors import GeotrainError

# Append only: a migration, once released, never changes. user_version = len(applied).
MIGRATIONS: list[str] = [
    """
    CREATE TABLE nodes (
        name TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        port INTEGER NOT NULL DEFAULT 22,
        username TEXT NOT NULL,
        key_path TEXT,
        jump TEXT,
        datacenter TEXT,
        status TEXT NOT NULL DEFAULT 'AVAILABLE',
        blockers TEXT NOT NULL DEFAULT '[]',
        facts TEXT NOT NULL DEFAULT '{}',
        cluster TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE clusters (
        name TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'READY',
        config TEXT NOT NULL DEFAULT '{}',
        kubeconfig_path TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE cluster_nodes (
        cluster TEXT NOT NULL REFERENCES clusters(name) ON DELETE CASCADE,
        node TEXT NOT NULL,
        role TEXT NOT NULL,
        mesh_ip TEXT,
        state TEXT NOT NULL DEFAULT '{}',
        PRIMARY KEY (cluster, node)
    );
    CREATE TABLE net_matrix (
        cluster TEXT NOT NULL REFERENCES clusters(name) ON DELETE CASCADE,
        src TEXT NOT NULL,
        dst TEXT NOT NULL,
        latency_ms REAL,
        mbit_s REAL,
        measured_at REAL NOT NULL,
        PRIMARY KEY (cluster, src, dst)
    );
    CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        cluster TEXT NOT NULL,
        spec TEXT NOT NULL,
        status TEXT NOT NULL,
        run_dir TEXT,
        last_loss REAL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE workspace_events (
        workspace TEXT NOT NULL,
        at REAL NOT NULL,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '{}'
    );
    CREATE TABLE settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    """,
]

LOCAL_CLUSTER = "local"


class Store:
    """The state database. Cheap to create; holds no open connection."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path else paths.database_path()
        try:
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise GeotrainError(f"the state database {self.path} cannot be used ({exc})",
                                "move it away to start afresh, or restore a backup") from None

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        conn.row_factory = sqlite3.Row
        # switching to WAL takes a lock that SQLite may refuse at once, without its busy handler, while
        # another process opens or switches the same new file ("database is locked", seen in CI with six
        # CLI processes starting together): only a database not yet in WAL switches, retried for the timeout
        deadline = time.monotonic() + 30
        while conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            try:
                conn.execute("PRAGMA journal_mode=WAL")
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    conn.close()
                    raise
                time.sleep(0.05)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        try:
            yield conn
        finally:
            conn.close()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One transaction: committed on success, rolled back on any error."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

    def _migrate(self) -> None:
        with self.write() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > len(MIGRATIONS):
                raise GeotrainError(
                    f"the state database {self.path} has schema version {version}, newer than this "
                    f"geotrain knows ({len(MIGRATIONS)})",
                    "use the newer geotrain that wrote it, or move the database away to start afresh")
            for index in range(version, len(MIGRATIONS)):
                for statement in MIGRATIONS[index].split(";"):
                    if statement.strip():
                        conn.execute(statement)
            if version < len(MIGRATIONS):
                conn.execute(f"PRAGMA user_version={len(MIGRATIONS)}")
            now = time.time()
            conn.execute(
                "INSERT OR IGNORE INTO clusters(name, kind, status, config, created_at, updated_at)"
                " VALUES (?, 'local', 'READY', '{}', ?, ?)",
                (LOCAL_CLUSTER, now, now),
            )

    def schema_version(self) -> int:
        with self.read() as conn:
            return conn.execute("PRAGMA user_version").fetchone()[0]

    # settings ---------------------------------------------------------------
    def get_setting(self, key: str, default: str | None = None) -> str | None:
        with self.read() as conn:
            row = conn.execute("SELECT value FROM settings WHERE key=?", (key,)).fetchone()
        return row["value"] if row else default

    def set_setting(self, key: str, value: str) -> None:
        with self.write() as conn:
            conn.execute(
                "INSERT INTO settings(key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (key, value),
            )


def loads(text: str | None, default: Any) -> Any:
    """A JSON column; a malformed one (edited by hand, disk damage) is a one-line error."""
    try:
        return json.loads(text) if text else default
    except (ValueError, RecursionError):
        raise GeotrainError("a record in the state database holds malformed JSON",
                            "restore a backup of the database, or move it away to start afresh") from None
