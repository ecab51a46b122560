"""A local file (an image tarball from the air-gap bundle: tens of GB) goes to a node streamed,
never read whole into memory: Connection.put with a Path, against a real sshd test host."""

from __future__ import annotations

import hashlib
import os
import tracemalloc

from core.nodes.known_hosts import KnownHosts
from core.nodes.ssh import Connection

PREFIX, SUBNET = "gtsu", "10.236.0.0/24"  # distinct from the other suites' hosts
SIZE = 24 << 20


def test_a_large_file_is_streamed_with_its_mode_and_content(make_test_hosts, tmp_path):
    (host,) = make_test_hosts(1, prefix=PREFIX, subnet=SUBNET)
    local = tmp_path / "images.tar"
    with local.open("wb") as out:
        for _ in range(SIZE >> 20):
            out.write(os.urandom(1 << 20))
    want = hashlib.sha256(local.read_bytes()).hexdigest()
    with Connection(host.ip, host.port, host.user, key_path=host.key_path,
                    known_hosts=KnownHosts(tmp_path / "known_hosts"), trusted={host.fingerprint},
                    connect_timeout=5) as conn:
        conn.connect()
        tracemalloc.start()
        conn.put(local, "/run/images.tar", mode=0o600)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < SIZE // 4, f"{peak} bytes held for a {SIZE}-byte file"
    assert host.run("stat -c %a /run/images.tar; sha256sum /run/images.tar").stdout.split()[:2] == ["600", want]
