"""The elastic quorum's network store (recipes.elastic_store): authentication, bounds, torch's gloo
through it, reconnects. Real server threads and sockets, real torch gloo ranks as processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from recipes import elastic_store, elastic_store_wire as wire
from recipes.elastic_store import StoreServer, quorum_view
from recipes.elastic_store_client import NetworkStore, StoreError
from tests.faults.faults import wait_for

ROOT = Path(__file__).resolve().parents[2]
TOKEN = os.urandom(32)


@pytest.fixture
def server():
    lines: list[str] = []
    srv = StoreServer("127.0.0.1", 0, TOKEN, log=lines.append).start()
    srv.lines = lines
    yield srv
    srv.close()


def _raw(srv) -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    hello = wire.recv_exact(sock, 20)
    assert hello[:4] == wire.MAGIC
    return sock, hello[4:]


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True


def _still_serving(srv) -> None:
    store = NetworkStore("127.0.0.1", srv.port, TOKEN, timeout=timedelta(seconds=5))
    store.set("alive", "yes")
    assert store.get("alive") == b"yes"
    store.close()


def test_operations_torch_calls(server):
    store = NetworkStore("127.0.0.1", server.port, TOKEN, timeout=timedelta(seconds=5))
    store.set("a", b"1")
    assert store.get("a") == b"1" and store.check(["a"]) and not store.check(["a", "b"])
    assert store.add("n", 3) == 3 and store.add("n", -1) == 2 and store.get("n") == b"2"
    assert store.compare_set("c", "", "x") == b"x"  # absent + empty expected: set
    assert store.compare_set("c", "y", "z") == b"x"  # mismatch: the current value
    assert store.compare_set("d", "y", "z") == b"y" and not store.check(["d"])
    store.append("l", "1;")
    store.append("l", "2;")
    assert store.get("l") == b"1;2;"
    assert store.get_many(["n", "absent", "l"]) == [b"2", None, b"1;2;"]
    assert store.num_keys() == 4 and store.delete_key("a") and not store.delete_key("a")
    got = []
    waiter = threading.Thread(target=lambda: got.append(store.get("later")))  # its own connection
    waiter.start()
    store.set("later", "v")
    waiter.join(10)
    assert got == [b"v"]
    with pytest.raises(RuntimeError, match="timed out"):
        store.wait(["never"], timedelta(seconds=0.2))
    assert server.snapshot("l") == {"l": b"1;2;", "later": b"v"}
    prefixed = NetworkStore("127.0.0.1", server.port, TOKEN, timeout=timedelta(seconds=5), prefix="gen0/")
    prefixed.set("q/1/0/members", "0:live:-1;")
    prefixed.set("q/10/0/members", "0:live:-1;")
    assert prefixed.check(["q/1/0/members"]) and "gen0/q/1/0/members" in server.snapshot("gen0/")
    assert prefixed.delete_prefix("q/1/") == 1 and sorted(server.snapshot("gen0/")) == ["gen0/q/10/0/members"]


def test_wrong_token_is_refused_and_logged_without_secrets(server):
    store = NetworkStore("127.0.0.1", server.port, os.urandom(32), timeout=timedelta(seconds=5))
    store.retry_s = 0.5
    with pytest.raises(RuntimeError, match="unreachable"):
        store.set("secret-key", "secret-value")
    assert any("bad header tag" in line for line in server.lines)
    assert not any("secret" in line or TOKEN.hex() in line for line in server.lines)
    assert not server.snapshot()
    _still_serving(server)


def test_a_recorded_request_cannot_be_replayed(server):
    sock, nonce = _raw(server)
    body = wire.pack_body(wire.SET, [b"k", b"first"])
    wire.send_frame(sock, TOKEN, nonce, 1, body, server=False)
    assert wire.recv_frame(sock, TOKEN, nonce, 1, server=False)
    frame = wire.HEADER.pack(len(body), 1) + wire.mac(TOKEN, nonce, b"h", 1, len(body).to_bytes(4, "big")) \
        + body + wire.mac(TOKEN, nonce, b"b", 1, body)
    sock.sendall(frame)  # the same request again on its own connection: counter 1 was used
    assert _closed(sock)
    other, _ = _raw(server)  # on a new connection: a fresh nonce, so the old tags do not match
    other.sendall(frame)
    assert _closed(other)
    assert any("counter 1 where 2" in line for line in server.lines)
    assert any("bad header tag" in line for line in server.lines)
    _still_serving(server)


def test_oversize_and_garbage_are_refused_and_the_server_serves_on(server):
    store = NetworkStore("127.0.0.1", server.port, TOKEN, timeout=timedelta(seconds=5))
    with pytest.raises(StoreError, match="512"):
        store.set("k" * 513, "v")
    with pytest.raises(StoreError, match="at most"):
        store.set("k", b"v" * (wire.MAX_VALUE + 1))
    assert store.num_keys() == 0  # the same connection still serves after a refusal
    sock, nonce = _raw(server)  # an authenticated header announcing more than a frame may hold
    size = wire.MAX_FRAME + 1
    sock.sendall(wire.HEADER.pack(size, 1) + wire.mac(TOKEN, nonce, b"h", 1, size.to_bytes(4, "big")))
    assert _closed(sock)
    garbage, _ = _raw(server)
    garbage.sendall(os.urandom(200))
    assert _closed(garbage)
    bad_body, nonce = _raw(server)  # an authenticated frame whose body is not our layout
    wire.send_frame(bad_body, TOKEN, nonce, 1, b"\x01\x00\x00\x00\x00\x00\x09", server=False)
    assert _closed(bad_body)
    assert any("over the" in line for line in server.lines)
    assert any("truncated" in line or "trailing" in line for line in server.lines)
    _still_serving(server)


def test_an_unauthenticated_peer_cannot_hold_or_fill_the_server(monkeypatch):
    """Found in review: 128 idle connections locked every client out, and a peer sending a byte every
    few seconds held its slot for minutes. Now connections still authenticating have their own small
    pool, at most a few per address, and one deadline in all for the first request."""
    monkeypatch.setattr(elastic_store, "AUTH_WAIT_S", 1.0)
    lines: list[str] = []
    srv = StoreServer("127.0.0.1", 0, TOKEN, log=lines.append).start()
    try:
        idle = [_raw(srv)[0] for _ in range(wire.MAX_PENDING_PER_PEER)]  # each read its hello
        extra = socket.create_connection(("127.0.0.1", srv.port), timeout=10)  # one more from this address
        assert _closed(extra)  # no hello: refused at once
        assert any("authenticating" in line for line in lines)
        trickle = idle[0]
        for _ in range(3):  # a byte every 0.4 s: under a per-read timeout this would stay forever
            try:
                trickle.sendall(b"\0")
            except OSError:
                break
            threading.Event().wait(0.4)
        wait_for(lambda: all(_closed(s) for s in idle), 10, "the idle and trickling peers cut at the deadline")
        assert any("no authenticated request within" in line for line in lines)
        _still_serving(srv)  # the pool is free again
        many = [NetworkStore("127.0.0.1", srv.port, TOKEN, timeout=timedelta(seconds=5)) for _ in range(12)]
        for i, store in enumerate(many):  # authenticated clients are not bound by the pending pool
            store.set(f"k{i}", "v")
        assert len(srv.snapshot("k")) == 12 and srv.connections >= 12
        for store in many:
            store.close()
    finally:
        srv.close()


def test_add_past_64_bits_is_refused_not_a_crash(server):
    store = NetworkStore("127.0.0.1", server.port, TOKEN, timeout=timedelta(seconds=5))
    store.add("n", (1 << 63) - 1)
    with pytest.raises(StoreError, match="64-bit"):
        store.add("n", 1)
    with pytest.raises(StoreError, match="64-bit"):
        store.add("m", 10 ** 4000)  # its str() would raise beyond Python's digit limit
    assert store.get("n") == str((1 << 63) - 1).encode()
    store.wait(["n"], timedelta(days=400))  # over the 32-bit millisecond field: capped, not a struct.error
    _still_serving(server)


def test_reconnects_after_the_server_drops_the_connection(server):
    store = NetworkStore("127.0.0.1", server.port, TOKEN, timeout=timedelta(seconds=5))
    store.set("before", "1")
    wait_for(lambda: server.connections == 1, 10, "the client's connection")
    assert server.drop_connections() == 1
    assert store.add("before", 1) == 2  # sent again on a new connection
    assert server.connections == 1


@pytest.mark.parametrize("size", [2, 4])
def test_gloo_all_reduce_through_the_network_store(server, size, tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(
        "import sys, torch, torch.distributed as dist\n"
        "from datetime import timedelta\n"
        "from recipes.elastic_store_client import NetworkStore\n"
        "rank, size, port, token = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), open(sys.argv[4], 'rb').read()\n"
        "store = NetworkStore('127.0.0.1', port, token, timeout=timedelta(seconds=60))\n"
        "pg = dist.ProcessGroupGloo(dist.PrefixStore('g/', store), rank, size, timedelta(seconds=60))\n"
        "t = torch.full((1000,), float(rank + 1))\n"
        "pg.allreduce([t]).wait()\n"
        "print(t[0].item(), t[-1].item())\n"
        "del pg  # its threads joined here, not torn down by the interpreter's exit (SIGABRT)\n")
    token_file = tmp_path / "token"
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, TOKEN)
    os.close(fd)
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(size), str(server.port), str(token_file)],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(size)]
    outs = [p.communicate(timeout=120) for p in procs]
    expected = float(sum(range(1, size + 1)))
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-2000:]
        assert out.split() == [str(expected), str(expected)]


def test_standalone_server_reads_its_token_from_a_file(tmp_path):
    token_file = tmp_path / "token"
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, TOKEN.hex().encode() + b"\n")
    os.close(fd)
    proc = subprocess.Popen([sys.executable, "-m", "recipes.elastic_store", "--host", "127.0.0.1", "--port", "0",
                             "--token-file", str(token_file)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        line = proc.stdout.readline()
        port = int(line.rsplit(":", 1)[1])
        store = NetworkStore("127.0.0.1", port, TOKEN.hex().encode(), timeout=timedelta(seconds=5))
        store.set("x", "1")
        assert store.get("x") == b"1"
    finally:
        proc.kill()
        proc.wait()
    short = tmp_path / "short"
    short.write_bytes(b"too short")
    refused = subprocess.run([sys.executable, "-m", "recipes.elastic_store", "--token-file", str(short)],
                             cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert refused.returncode != 0 and "at least 32" in refused.stderr


def test_quorum_view_reads_the_elastic_keys():
    keys = {"gen1/outer/current": b"4", "gen1/q/5/0/members": b"0:live:-1:dc0;1:live:-1:dc0;",
            "gen2/outer/current": b"6", "gen2/q/6/0/members": b"0:live:-1:dc0;",
            "gen2/q/7/1/members": b"0:live:-1:dc0;2:live:-1:dc1;3:join:5:dc1;",
            "gen2/q/7/0/members": b"0:live:-1:dc0;", "gen2/hb/0": b"9"}
    assert quorum_view(keys) == {"outer_step": 6, "members": [0, 2, 3],
                                 "datacenters": {"dc0": [0], "dc1": [2, 3]}, "generation": "2"}
    assert quorum_view({}) == {"outer_step": None, "members": [], "datacenters": {}, "generation": ""}
    assert quorum_view({"gen0/q/1/0/members": b"0:live:-1;"})["datacenters"] == {"default": [0]}


def test_store_urls():
    assert wire.parse_url("/run/x/store") is None
    assert wire.parse_url("geotrain-store://watcher.ns.svc:29401") == ("watcher.ns.svc", 29401)
    for bad in ("geotrain-store://h:0", "geotrain-store://h;rm -rf:1", "geotrain-store://h:99999"):
        with pytest.raises(ValueError):
            wire.parse_url(bad)
