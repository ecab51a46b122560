"""The elastic quorum's store across datacenters: a small authenticated key-value server.

On the local cluster the workers meet in a FileStore (recipes.private_store). Across
datacenters they need a network store; torch's TCPStore is unauthenticated (any host that
reaches its port lists and writes every key) and is not used. This one is standard library
only (the watcher pod that holds it imports no torch) and speaks its own framing:

    server -> client, once:  b"GTS1" + 16-byte random nonce            (the connection's challenge)
    client -> server frame:  header = u32 body_len | u64 counter | 32-byte HMAC(nonce, "h", counter, body_len)
                             body   = u8 op | u32 timeout_ms | u16 nargs | (u32 len | bytes) * nargs
                             tag    = 32-byte HMAC(nonce, "b", counter, body)
    server -> client frame:  the same layout, direction "H"/"B", status in place of op.

HMAC-SHA256 under the workspace token (>= 32 bytes, read from a file, never argv or env values),
compared with hmac.compare_digest. The counter must rise by one per request on a connection and
the nonce is fresh per connection, so a recorded request replays neither on its own connection
nor on another. The header is checked before the body is read, so an unauthenticated peer makes
the server hold at most 44 bytes. A connection that fails authentication or framing is closed
and logged as one line (peer and reason: never a key or a value).

Bounds (documented for the watcher's footprint): key <= 512 bytes, value <= 4 MiB (the elastic
quorum stores member lists and gloo's addresses; model state moves over gloo, not the store),
200,000 keys, 256 MiB of keys and values in all, 128 connections, 10 s for a new connection to
authenticate its first request. Nothing is pickled or evaluated: keys and values are bytes.

Operations (what torch.distributed's gloo rendezvous, PrefixStore and recipes.elastic call):
set, get (waits up to a timeout), add, check, wait, compare_set, append, delete_key, num_keys;
get_many (one round trip for every rank's heartbeat across a WAN), and delete_prefix, with which recipes.elastic drops the keys of outer steps two behind (a long run with a
short H would otherwise fill the 200,000 keys in hours).

    python -m recipes.elastic_store --host 0.0.0.0 --port 29401 --token-file /var/run/geotrain/store-token
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import re
import socket
import socketserver
import struct
import sys
import threading
import time

from recipes.elastic_quorum import parse_members, quorum_view

MAGIC = b"GTS1"
NONCE_BYTES = 16
TAG = 32
HEADER = struct.Struct(">IQ")  # body length, counter
BODY_HEAD = struct.Struct(">BIH")  # op or status, timeout ms, argument count
MIN_TOKEN = 32
MAX_KEY = 512
MAX_VALUE = 4 << 20
MAX_ARGS = 4096  # a wait/check on many keys (gloo's rendezvous checks one per rank)
MAX_FRAME = MAX_VALUE + MAX_ARGS * (MAX_KEY + 4) + BODY_HEAD.size + 64
MAX_KEYS = 200_000
MAX_TOTAL = 256 << 20
MAX_CONNECTIONS = 128
AUTH_WAIT_S = 10.0
MAX_WAIT_MS = 3_600_000
URL = re.compile(r"geotrain-store://([A-Za-z0-9.-]{1,253}|\[[0-9a-fA-F:]{2,39}\]):([0-9]{1,5})")

# ops
SET, GET, ADD, CHECK, WAIT, COMPARE_SET, APPEND, DELETE, NUM_KEYS, DELETE_PREFIX, GET_MANY = range(1, 12)
# statuses
OK, TIMEOUT, MISSING, REFUSED = range(4)


class ProtocolError(Exception):
    """A frame that is not ours: the connection is closed."""


def read_token(path: str) -> bytes:
    """The workspace token from `path` (a Secret's file): at most 4 KiB, at least 32 bytes, trailing
    newline dropped. Links are followed (Kubernetes mounts Secret keys through ..data links)."""
    with open(path, "rb") as fh:
        data = fh.read(4097)
    if len(data) > 4096:
        raise SystemExit(f"the store token file {path} is over 4 KiB: it should hold one random token")
    token = data.rstrip(b"\r\n")
    if len(token) < MIN_TOKEN:
        raise SystemExit(f"the store token in {path} is {len(token)} bytes; it needs at least {MIN_TOKEN} "
                         "random bytes (e.g. python -c 'import secrets; print(secrets.token_hex(32))')")
    return token


def parse_url(value: str) -> tuple[str, int] | None:
    """(host, port) of a `geotrain-store://HOST:PORT` value; None for anything else (a file path)."""
    if not value.startswith("geotrain-store://"):
        return None
    match = URL.fullmatch(value)
    if not match or not 0 < int(match.group(2)) < 65536:
        raise ValueError(f"{value!r} is not geotrain-store://HOST:PORT (a host name or address, a port 1-65535)")
    return match.group(1).strip("[]"), int(match.group(2))


def mac(token: bytes, nonce: bytes, part: bytes, counter: int, data: bytes) -> bytes:
    return hmac.new(token, nonce + part + struct.pack(">Q", counter) + data, hashlib.sha256).digest()


def pack_body(code: int, args: list[bytes], timeout_ms: int = 0) -> bytes:
    out = [BODY_HEAD.pack(code, timeout_ms, len(args))]
    for arg in args:
        out.append(struct.pack(">I", len(arg)))
        out.append(arg)
    return b"".join(out)


def unpack_body(body: bytes) -> tuple[int, int, list[bytes]]:
    if len(body) < BODY_HEAD.size:
        raise ProtocolError("short body")
    code, timeout_ms, count = BODY_HEAD.unpack_from(body)
    if count > MAX_ARGS:
        raise ProtocolError("too many arguments")
    args, pos = [], BODY_HEAD.size
    for _ in range(count):
        if pos + 4 > len(body):
            raise ProtocolError("truncated argument")
        (size,) = struct.unpack_from(">I", body, pos)
        pos += 4
        if pos + size > len(body):
            raise ProtocolError("truncated argument")
        args.append(body[pos:pos + size])
        pos += size
    if pos != len(body):
        raise ProtocolError("trailing bytes")
    return code, timeout_ms, args


def send_frame(sock: socket.socket, token: bytes, nonce: bytes, counter: int, body: bytes, server: bool) -> None:
    head, tail = (b"H", b"B") if server else (b"h", b"b")
    length = struct.pack(">I", len(body))
    sock.sendall(HEADER.pack(len(body), counter) + mac(token, nonce, head, counter, length)
                 + body + mac(token, nonce, tail, counter, body))


def recv_exact(sock: socket.socket, size: int) -> bytes:
    parts, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def recv_frame(sock: socket.socket, token: bytes, nonce: bytes, counter: int, server: bool) -> bytes:
    """The next authenticated body; ProtocolError for a bad tag, counter or size."""
    head, tail = (b"h", b"b") if server else (b"H", b"B")
    raw = recv_exact(sock, HEADER.size + TAG)
    length, got_counter = HEADER.unpack_from(raw)
    if not hmac.compare_digest(raw[HEADER.size:], mac(token, nonce, head, got_counter, struct.pack(">I", length))):
        raise ProtocolError("bad header tag (wrong token or not a geotrain store client)")
    if got_counter != counter:
        raise ProtocolError(f"counter {got_counter} where {counter} was due (a replayed or reordered request)")
    if length > MAX_FRAME:
        raise ProtocolError(f"a {length}-byte frame is over the {MAX_FRAME}-byte bound")
    body = recv_exact(sock, length)
    if not hmac.compare_digest(recv_exact(sock, TAG), mac(token, nonce, tail, counter, body)):
        raise ProtocolError("bad body tag")
    return body


class Table:
    """The keys and values, one lock, a condition for waiters."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.total = 0
        self.cond = threading.Condition()

    def _put(self, key: bytes, value: bytes) -> None:
        old = self.data.get(key)
        grow = len(value) - (len(old) if old is not None else -len(key))
        if old is None and len(self.data) >= MAX_KEYS:
            raise OverflowError(f"the store holds its maximum of {MAX_KEYS} keys")
        if self.total + grow > MAX_TOTAL:
            raise OverflowError(f"the store holds its maximum of {MAX_TOTAL >> 20} MiB")
        self.data[key] = value
        self.total += grow
        self.cond.notify_all()

    def _wait(self, keys: list[bytes], timeout_ms: int) -> bool:
        deadline = time.monotonic() + min(timeout_ms, MAX_WAIT_MS) / 1000
        while not all(k in self.data for k in keys):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.cond.wait(left)
        return True

    def apply(self, op: int, timeout_ms: int, args: list[bytes]) -> tuple[int, list[bytes]]:
        if op in (SET, GET, ADD, COMPARE_SET, APPEND, DELETE, DELETE_PREFIX) and (not args or len(args[0]) > MAX_KEY):
            return REFUSED, [f"a key of at most {MAX_KEY} bytes is needed".encode()]
        if op in (CHECK, WAIT, GET_MANY) and any(len(k) > MAX_KEY for k in args):
            return REFUSED, [f"keys are at most {MAX_KEY} bytes".encode()]
        if any(len(a) > MAX_VALUE for a in args):
            return REFUSED, [f"values are at most {MAX_VALUE} bytes".encode()]
        with self.cond:
            try:
                return self._apply(op, timeout_ms, args)
            except OverflowError as exc:
                return REFUSED, [str(exc).encode()]

    def _apply(self, op: int, timeout_ms: int, args: list[bytes]) -> tuple[int, list[bytes]]:
        key = args[0] if args else b""
        if op == SET and len(args) == 2:
            self._put(key, args[1])
            return OK, []
        if op == GET and len(args) == 1:
            if not self._wait([key], timeout_ms):
                return TIMEOUT, []
            return OK, [self.data[key]]
        if op == ADD and len(args) == 2:
            try:
                value = int(self.data.get(key, b"0")) + int(args[1])
            except ValueError:
                return REFUSED, [b"add on a value that is not an integer"]
            self._put(key, str(value).encode())
            return OK, [str(value).encode()]
        if op == CHECK:
            return OK, [b"1" if all(k in self.data for k in args) else b"0"]
        if op == WAIT:
            return (OK if self._wait(args, timeout_ms) else TIMEOUT), []
        if op == COMPARE_SET and len(args) == 3:
            current = self.data.get(key)
            if current is None:
                if args[1]:
                    return OK, [args[1]]
            elif current != args[1]:
                return OK, [current]
            self._put(key, args[2])
            return OK, [args[2]]
        if op == APPEND and len(args) == 2:
            joined = self.data.get(key, b"") + args[1]
            if len(joined) > MAX_VALUE:
                return REFUSED, [f"values are at most {MAX_VALUE} bytes".encode()]
            self._put(key, joined)
            return OK, []
        if op == DELETE and len(args) == 1:
            old = self.data.pop(key, None)
            if old is not None:
                self.total -= len(key) + len(old)
            return OK, [b"1" if old is not None else b"0"]
        if op == DELETE_PREFIX and len(args) == 1 and args[0]:
            gone = [k for k in self.data if k.startswith(args[0])]
            for k in gone:
                self.total -= len(k) + len(self.data.pop(k))
            return OK, [str(len(gone)).encode()]
        if op == GET_MANY:  # per key b"1" and its value, or b"0" and b"" (absent): no waiting
            if sum(len(self.data.get(k, b"")) for k in args) > MAX_VALUE:
                return REFUSED, [f"values are at most {MAX_VALUE} bytes in all".encode()]
            return OK, [part for k in args for part in ((b"1", self.data[k]) if k in self.data else (b"0", b""))]
        if op == NUM_KEYS and not args:
            return OK, [str(len(self.data)).encode()]
        return REFUSED, [b"unknown operation or wrong arguments"]


class _Handler(socketserver.BaseRequestHandler):
    server: "_Server"

    def handle(self) -> None:
        sock, owner = self.request, self.server.owner
        peer = "%s:%s" % self.client_address[:2]
        if not owner._slots.acquire(blocking=False):
            owner._log(f"refused {peer}: {MAX_CONNECTIONS} connections are open")
            return
        with owner._lock:
            owner._open.add(sock)
        try:
            self._serve(sock, owner, peer)
        finally:
            with owner._lock:
                owner._open.discard(sock)
            owner._slots.release()

    def _serve(self, sock: socket.socket, owner: "StoreServer", peer: str) -> None:
        nonce = os.urandom(NONCE_BYTES)
        counter = 1
        try:
            sock.sendall(MAGIC + nonce)
            sock.settimeout(AUTH_WAIT_S)  # until the first request authenticates
            while True:
                try:
                    body = recv_frame(sock, owner.token, nonce, counter, server=True)
                    op, timeout_ms, args = unpack_body(body)
                except ProtocolError as exc:
                    owner._log(f"closed {peer}: {exc}")
                    return
                except socket.timeout:
                    if counter == 1:
                        owner._log(f"closed {peer}: no authenticated request within {AUTH_WAIT_S:.0f} s")
                    return
                sock.settimeout(None)
                status, out = owner.table.apply(op, timeout_ms, args)
                send_frame(sock, owner.token, nonce, counter, pack_body(status, out), server=True)
                counter += 1
        except (ConnectionError, OSError):
            return  # the client went away


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64
    owner: "StoreServer"


class StoreServer:
    """The store, served from a daemon thread: StoreServer(host, port, token).start()."""

    def __init__(self, host: str, port: int, token: bytes, log=None) -> None:
        if len(token) < MIN_TOKEN:
            raise ValueError(f"the store token needs at least {MIN_TOKEN} bytes")
        self.host, self.token = host, token
        self.table = Table()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._logger = log or (lambda line: print(line, file=sys.stderr, flush=True))
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_class = type("_BoundServer", (_Server,), {"address_family": family})
        self._server = server_class((host, port), _Handler)
        self._server.owner = self
        self.port = self._server.server_address[1]
        self._thread: threading.Thread | None = None

    def _log(self, line: str) -> None:
        self._logger(f"elastic store: {line}")

    def start(self) -> "StoreServer":
        self._thread = threading.Thread(target=self._server.serve_forever, name="elastic-store", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.drop_connections()

    def drop_connections(self) -> int:
        """Cut every open connection (clients reconnect); how many were cut."""
        with self._lock:
            open_ = list(self._open)
        for sock in open_:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(open_)

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._open)

    def snapshot(self, prefix: str = "") -> dict[str, bytes]:
        """A copy of the keys under `prefix` (read-only view for the watcher)."""
        raw = prefix.encode()
        with self.table.cond:
            return {k.decode(errors="replace"): v for k, v in self.table.data.items() if k.startswith(raw)}

    def quorum_view(self) -> dict:
        """The newest generation's outer step and the members of its newest quorum, by datacenter."""
        return quorum_view(self.snapshot("gen"))


__all__ = ["StoreServer", "parse_members", "quorum_view", "serve_main"]


def serve_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipes.elastic_store", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=29401)
    parser.add_argument("--token-file", required=True, help="a file holding the workspace token (>= 32 bytes)")
    args = parser.parse_args(argv)
    server = StoreServer(args.host, args.port, read_token(args.token_file)).start()
    print(f"elastic store: serving on {args.host}:{server.port}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(serve_main())
