"""Host keys of servers behind jump hosts are pinned per route (jump + host + port).

Two bastions each front a different server under the same private name: each bastion's
own /etc/hosts maps `node-internal` to a different test host, as two sites with the same
10.0.0.5 would. Pinned by the name alone, the second locked the first out.
"""

from __future__ import annotations

import pytest

from core.nodes.known_hosts import KnownHosts
from core.nodes.ssh import Connection, HostKeyError

PREFIX, SUBNET = "gthj", "10.232.0.0/24"


def _via(jump, target_name, known, trusted=()) -> Connection:
    return Connection("node-internal", 22, "root", key_path=jump.key_path,
                      jump=f"root@{jump.ip}", known_hosts=known, trusted=set(trusted),
                      connect_timeout=5)


def _hostname(conn: Connection) -> str:
    with conn:
        return conn.run("hostname").stdout.strip()


@pytest.fixture
def two_sites(make_test_hosts):
    jump1, jump2, a, b = make_test_hosts(4, prefix=PREFIX, subnet=SUBNET)
    for jump, target in ((jump1, a), (jump2, b)):
        (jump.dir / "hosts").write_text((jump.dir / "hosts").read_text()
                                        + f"{target.ip} node-internal\n")
    return jump1, jump2, a, b


def test_same_private_name_behind_two_bastions_pins_two_keys(two_sites, tmp_path):
    jump1, jump2, a, b = two_sites
    known = KnownHosts(tmp_path / "known_hosts")
    assert _hostname(_via(jump1, a, known, {jump1.fingerprint, a.fingerprint})) == a.name
    assert _hostname(_via(jump2, b, known, {jump2.fingerprint, b.fingerprint})) == b.name
    known.save()
    labels = [line.split()[0] for line in known.path.read_text().splitlines()]
    assert f"jump:{jump1.ip}>node-internal" in labels and f"jump:{jump2.ip}>node-internal" in labels
    # both pinned: neither locks the other out, and nothing needs trusting any more
    assert _hostname(_via(jump1, a, known)) == a.name
    assert _hostname(_via(jump2, b, known)) == b.name
    b.regenerate_host_key()  # a changed key is still refused on its own route
    with pytest.raises(HostKeyError, match=f"HOST KEY CHANGED for jump:{jump2.ip}>node-internal"):
        _via(jump2, b, known).connect()


def test_a_pin_under_the_bare_name_is_migrated_not_shared(two_sites, tmp_path):
    jump1, jump2, a, b = two_sites
    path = tmp_path / "known_hosts"
    # as written before pins named the route: jump hosts pinned, the target by name only
    path.write_text(f"{jump1.ip} {jump1.host_pubkey}\n{jump2.ip} {jump2.host_pubkey}\n"
                    f"node-internal {a.host_pubkey}\n")
    known = KnownHosts(path)
    assert _hostname(_via(jump1, a, known)) == a.name  # the old pin holds this key: kept
    with pytest.raises(HostKeyError, match="is not trusted yet"):  # first contact, not "CHANGED"
        _via(jump2, b, known).connect()
    known.save()
    assert f"jump:{jump1.ip}>node-internal {a.host_pubkey}" in path.read_text()
