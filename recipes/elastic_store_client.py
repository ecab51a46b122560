"""The workers' side of recipes.elastic_store: a torch.distributed.Store over its authenticated framing.

    store = NetworkStore("10.0.0.5", 29401, token, timeout=timedelta(seconds=60))
    pg = dist.ProcessGroupGloo(dist.PrefixStore("step7/", store), rank, size, timeout)

One socket per thread (torch calls the store from the rendezvous thread and the training
thread; recipes.elastic's heartbeat opens its own handle). A connection that breaks is
reopened and the request sent again, for up to GEOTRAIN_ELASTIC_STORE_RETRY_S seconds (default
300): a datacenter whose link is cut for a minute comes back. A request whose answer was lost
may be applied twice: add (heartbeats: only their change matters) and append (recipes.elastic
registers a rank once however often it appends) tolerate that; set, compare_set, delete, wait,
check and get are idempotent.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from datetime import timedelta

import torch.distributed as dist

from recipes import elastic_store_wire as wire
from recipes.telemetry import say

RETRY_ENV = "GEOTRAIN_ELASTIC_STORE_RETRY_S"
TOKEN_FILE_ENV = "GEOTRAIN_ELASTIC_STORE_TOKEN_FILE"
CONNECT_TIMEOUT_S = 10.0
REPLY_MARGIN_S = 30.0  # on top of a wait's own timeout before a silent server counts as gone


class StoreError(RuntimeError):
    """The server refused a request (size bounds, a full store): retrying would not help."""


class _Connection:
    def __init__(self, host: str, port: int, token: bytes) -> None:
        self.sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        hello = wire.recv_exact(self.sock, len(wire.MAGIC) + wire.NONCE_BYTES)
        if hello[:len(wire.MAGIC)] != wire.MAGIC:
            self.sock.close()
            raise ConnectionError(f"{host}:{port} is not a geotrain elastic store")
        self.nonce, self.token, self.counter = hello[len(wire.MAGIC):], token, 1

    def call(self, op: int, args: list[bytes], timeout_ms: int) -> tuple[int, list[bytes]]:
        self.sock.settimeout(timeout_ms / 1000 + REPLY_MARGIN_S)
        wire.send_frame(self.sock, self.token, self.nonce, self.counter, wire.pack_body(op, args, timeout_ms), False)
        try:
            body = wire.recv_frame(self.sock, self.token, self.nonce, self.counter, server=False)
        except wire.ProtocolError as exc:  # a reply that does not authenticate: not our server
            raise ConnectionError(f"the store's reply did not authenticate: {exc}") from exc
        self.counter += 1
        status, _, out = wire.unpack_body(body)
        return status, out

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _bytes(value) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


# torch 2.13's PrefixStore forwards set/get/add/wait/compare_set/delete_key to a Python Store but not
# check or append ("pure virtual function"); so a prefix is the store's own: PrefixStore is for gloo only.


class NetworkStore(dist.Store):
    """A torch.distributed.Store on a recipes.elastic_store server."""

    def __init__(self, host: str, port: int, token: bytes, timeout: timedelta = timedelta(seconds=300),
                 prefix: str = "") -> None:
        super().__init__()
        self.host, self.port, self._token = host, port, token
        self._prefix = prefix.encode()
        self._timeout = timeout
        self.retry_s = float(os.environ.get(RETRY_ENV, "300"))
        self._local = threading.local()

    # plumbing ------------------------------------------------------------------
    def _call(self, op: int, args: list[bytes], timeout_ms: int = 0) -> list[bytes]:
        failing_since = None
        while True:
            conn = getattr(self._local, "conn", None)
            try:
                if conn is None:
                    conn = self._local.conn = _Connection(self.host, self.port, self._token)
                status, out = conn.call(op, args, timeout_ms)
            except (OSError, ConnectionError) as exc:
                if conn is not None:
                    conn.close()
                self._local.conn = None
                now = time.monotonic()
                if failing_since is None:
                    failing_since = now
                    say(int(os.environ.get("RANK", "-1")), f"elastic store {self.host}:{self.port} unreachable ({exc}); retrying "
                            f"for up to {self.retry_s:.0f} s")
                if now - failing_since > self.retry_s:
                    raise RuntimeError(f"the elastic store {self.host}:{self.port} was unreachable for "
                                       f"{self.retry_s:.0f} s: {exc}") from exc
                time.sleep(min(2.0, 0.1 * 2 ** min(5, int(now - failing_since))))
                continue
            if status == wire.TIMEOUT:
                raise RuntimeError(f"timed out after {timeout_ms / 1000:.0f} s waiting for keys "
                                   f"{[a.decode(errors='replace')[:80] for a in args[:4]]} in the elastic store")
            if status != wire.OK:
                raise StoreError(f"the elastic store refused: {(out[0] if out else b'').decode(errors='replace')}")
            return out

    def _key(self, key) -> bytes:
        return self._prefix + _bytes(key)

    def _timeout_ms(self, timeout: timedelta | None = None) -> int:
        ms = int((timeout if timeout is not None else self._timeout).total_seconds() * 1000)
        return max(0, min(ms, wire.MAX_WAIT_MS))  # the server waits at most MAX_WAIT_MS; the field is 32 bits

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # torch.distributed.Store ------------------------------------------------------
    @property
    def timeout(self) -> timedelta:
        return self._timeout

    def set_timeout(self, timeout: timedelta) -> None:
        self._timeout = timeout

    def set(self, key: str, value) -> None:
        self._call(wire.SET, [self._key(key), _bytes(value)])

    def get(self, key: str) -> bytes:
        return self._call(wire.GET, [self._key(key)], self._timeout_ms())[0]

    def add(self, key: str, amount: int) -> int:
        return int(self._call(wire.ADD, [self._key(key), str(int(amount)).encode()])[0])

    def check(self, keys: list[str]) -> bool:
        return self._call(wire.CHECK, [self._key(k) for k in keys])[0] == b"1"

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        self._call(wire.WAIT, [self._key(k) for k in keys], self._timeout_ms(timeout))

    def compare_set(self, key: str, expected, desired) -> bytes:
        return self._call(wire.COMPARE_SET, [self._key(key), _bytes(expected), _bytes(desired)])[0]

    def append(self, key: str, value) -> None:
        self._call(wire.APPEND, [self._key(key), _bytes(value)])

    def delete_key(self, key: str) -> bool:
        return self._call(wire.DELETE, [self._key(key)])[0] == b"1"

    def get_many(self, keys: list[str]) -> list[bytes | None]:
        """The values of `keys` in one round trip (None where absent), without waiting."""
        out = self._call(wire.GET_MANY, [self._key(k) for k in keys])
        return [value if present == b"1" else None for present, value in zip(out[0::2], out[1::2])]

    def delete_prefix(self, prefix: str) -> int:
        """Delete every key under `prefix` (after this store's own prefix); how many were deleted."""
        return int(self._call(wire.DELETE_PREFIX, [self._key(prefix)])[0])

    def num_keys(self) -> int:
        return int(self._call(wire.NUM_KEYS, [])[0])

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return [self.get(k) for k in keys]

    def multi_set(self, keys: list[str], values: list) -> None:
        for key, value in zip(keys, values):
            self.set(key, value)

    def has_extended_api(self) -> bool:
        return True


def from_url(value: str, timeout: timedelta, prefix: str = "") -> NetworkStore | None:
    """The NetworkStore for GEOTRAIN_ELASTIC_STORE=geotrain-store://HOST:PORT (token from the file named by
    GEOTRAIN_ELASTIC_STORE_TOKEN_FILE); None when `value` is a file path."""
    address = wire.parse_url(value)
    if address is None:
        return None
    token_file = os.environ.get(TOKEN_FILE_ENV)
    if not token_file:
        raise SystemExit(f"{value} needs {TOKEN_FILE_ENV}: the file holding the workspace's store token")
    return NetworkStore(*address, wire.read_token(token_file), timeout=timeout, prefix=prefix)
