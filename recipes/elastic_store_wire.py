"""The elastic store's wire format and bounds (recipes.elastic_store's docstring describes both),
shared by the server (recipes.elastic_store) and the torch client (recipes.elastic_store_client).
Standard library only."""

from __future__ import annotations

import hashlib
import hmac
import re
import socket
import struct

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
MAX_CONNECTIONS = 1024  # authenticated: two per rank (main thread, heartbeat)
MAX_PENDING = 32  # connections not yet authenticated, in all ...
MAX_PENDING_PER_PEER = 4  # ... and from one address (an unauthenticated peer cannot fill the pool)
AUTH_WAIT_S = 10.0  # in all, for the first authenticated request
MAX_COUNT = 1 << 63  # add's result, as torch's int64 counters
KEEPALIVE = (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))
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
