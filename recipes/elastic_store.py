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
200,000 keys, 256 MiB of keys and values in all, 1024 authenticated connections (two per rank:
its main thread and its heartbeat), 32 connections still authenticating and 4 of them per peer
address, each given 10 s in all (not per read: a peer trickling bytes is cut at 10 s) to
authenticate its first request; TCP keepalive on every connection, so the slot of a peer lost
behind a cut link is freed in about a minute. Nothing is pickled or evaluated: keys and values are bytes.

Operations (what torch.distributed's gloo rendezvous, PrefixStore and recipes.elastic call):
set, get (waits up to a timeout), add, check, wait, compare_set, append, delete_key, num_keys;
get_many (one round trip for every rank's heartbeat across a WAN), and delete_prefix, with which recipes.elastic drops the keys of outer steps two behind (a long run with a
short H would otherwise fill the 200,000 keys in hours).

    python -m recipes.elastic_store --host 0.0.0.0 --port 29401 --token-file /var/run/geotrain/store-token
"""

from __future__ import annotations

import argparse
import os
import socket
import socketserver
import sys
import threading
import time

from recipes.elastic_quorum import parse_members, quorum_view
from recipes.elastic_store_wire import (ADD, APPEND, AUTH_WAIT_S, CHECK, COMPARE_SET, DELETE, DELETE_PREFIX, GET,
                                        GET_MANY, KEEPALIVE, MAGIC, MAX_CONNECTIONS, MAX_COUNT, MAX_KEY,
                                        MAX_KEYS, MAX_PENDING, MAX_PENDING_PER_PEER, MAX_TOTAL, MAX_VALUE, MIN_TOKEN,
                                        MAX_WAIT_MS, NONCE_BYTES, NUM_KEYS, OK, REFUSED, SET, TIMEOUT, WAIT,
                                        ProtocolError, pack_body, parse_url, read_token, recv_frame, send_frame,
                                        unpack_body)


LOG_BURST = 20  # log lines a minute


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
            if not -MAX_COUNT <= value < MAX_COUNT:
                return REFUSED, [b"add beyond a 64-bit integer"]
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
        peer, address = "%s:%s" % self.client_address[:2], self.client_address[0]
        if not owner._admit(address):
            owner._log(f"refused {peer}: {MAX_PENDING} connections are authenticating (or "
                       f"{MAX_PENDING_PER_PEER} from this address)")
            return
        with owner._lock:
            owner._open.add(sock)
        holding = "pending"
        try:
            _keepalive(sock)
            holding = self._serve(sock, owner, peer, address)
        finally:
            with owner._lock:
                owner._open.discard(sock)
            owner._release(holding, address)

    def _serve(self, sock: socket.socket, owner: "StoreServer", peer: str, address: str) -> str:
        """Serves the connection; which slot it holds at the end ("pending", "served" or "none")."""
        nonce = os.urandom(NONCE_BYTES)
        counter, holding = 1, "pending"
        # one deadline for the whole first request: a timeout per read would let a peer that sends a
        # byte every few seconds hold its slot for as long as it likes
        expired: list[bool] = []
        cut = threading.Timer(AUTH_WAIT_S, lambda: (expired.append(True), _shut(sock)))
        cut.daemon = True
        cut.start()
        try:
            sock.sendall(MAGIC + nonce)
            while True:
                try:
                    body = recv_frame(sock, owner.token, nonce, counter, server=True)
                    op, timeout_ms, args = unpack_body(body)
                except ProtocolError as exc:
                    owner._log(f"closed {peer}: {exc}")
                    return holding
                except (ConnectionError, OSError):
                    if counter == 1 and expired:
                        owner._log(f"closed {peer}: no authenticated request within {AUTH_WAIT_S:.0f} s")
                    return holding
                if counter == 1:
                    cut.cancel()
                    holding = owner._promote(address)
                    if holding == "none":
                        owner._log(f"refused {peer}: {MAX_CONNECTIONS} authenticated connections are open")
                        send_frame(sock, owner.token, nonce, counter, pack_body(REFUSED, [
                            f"the store serves at most {MAX_CONNECTIONS} connections".encode()]), server=True)
                        return holding
                status, out = owner.table.apply(op, timeout_ms, args)
                send_frame(sock, owner.token, nonce, counter, pack_body(status, out), server=True)
                counter += 1
        except (ConnectionError, OSError):
            return holding  # the client went away
        finally:
            cut.cancel()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _keepalive(sock: socket.socket) -> None:
    """Probe an idle connection, so that a peer gone behind a cut link frees its slot (Linux's
    options; elsewhere the system's keepalive defaults)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in KEEPALIVE:
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


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
        self._lock = threading.Lock()
        self._pending: dict[str, int] = {}  # peer address -> connections authenticating
        self._served = 0
        self._log_window = [time.monotonic(), 0, 0]  # window start, lines in it, lines left out
        self._open: set[socket.socket] = set()
        self._logger = log or (lambda line: print(line, file=sys.stderr, flush=True))
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_class = type("_BoundServer", (_Server,), {"address_family": family})
        self._server = server_class((host, port), _Handler)
        self._server.owner = self
        self.port = self._server.server_address[1]
        self._thread: threading.Thread | None = None

    def _admit(self, address: str) -> bool:
        with self._lock:
            if sum(self._pending.values()) >= MAX_PENDING or self._pending.get(address, 0) >= MAX_PENDING_PER_PEER:
                return False
            self._pending[address] = self._pending.get(address, 0) + 1
            return True

    def _promote(self, address: str) -> str:
        """An authenticated connection leaves the pending pool: "served", or "none" when full."""
        with self._lock:
            self._drop_pending(address)
            if self._served >= MAX_CONNECTIONS:
                return "none"
            self._served += 1
            return "served"

    def _release(self, holding: str, address: str) -> None:
        with self._lock:
            if holding == "pending":
                self._drop_pending(address)
            elif holding == "served":
                self._served -= 1

    def _drop_pending(self, address: str) -> None:
        left = self._pending.get(address, 0) - 1
        if left > 0:
            self._pending[address] = left
        else:
            self._pending.pop(address, None)

    def _log(self, line: str) -> None:
        """One line, at most LOG_BURST a minute (refusals come at whatever rate a peer likes); the
        number left out is said with the next line let through."""
        now = time.monotonic()
        with self._lock:
            if now - self._log_window[0] >= 60:
                self._log_window = [now, 0, self._log_window[2]]
            self._log_window[1] += 1
            if self._log_window[1] > LOG_BURST:
                self._log_window[2] += 1
                return
            skipped, self._log_window[2] = self._log_window[2], 0
        note = f" ({skipped} lines like it left out)" if skipped else ""
        self._logger(f"elastic store: {line}{note}")

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
            _shut(sock)
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


__all__ = ["StoreServer", "parse_members", "parse_url", "quorum_view", "read_token", "serve_main"]


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
