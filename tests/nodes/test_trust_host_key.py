"""`--trust-host-key` re-pins a reinstalled server on `nodes refresh` and `clusters deploy`."""

from __future__ import annotations

import json

from core.bootstrap.deploy import pool_shells
from core.cli import main
from core.nodes.known_hosts import known_hosts_path
from core.state.node_records import get_node
from core.state.store import Store

PREFIX, SUBNET = "gtht", "10.233.0.0/24"


def _cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _import(capsys, host):
    assert _cli(capsys, "nodes", "import-ssh", "--name", host.name, "--endpoint", host.endpoint,
                "--username", host.user, "--ssh-key-path", host.key_path,
                "--trust-host-key", host.fingerprint, "--connect-timeout", "3")[0] == 0


def test_refresh_re_pins_a_reinstalled_server_only_with_its_new_fingerprint(make_test_hosts, capsys):
    (host,) = make_test_hosts(1, prefix=PREFIX, subnet=SUBNET)
    _import(capsys, host)
    old = host.fingerprint
    host.regenerate_host_key()
    code, out, _ = _cli(capsys, "nodes", "refresh", host.name, "--json", "--connect-timeout", "3")
    (node,) = json.loads(out)
    assert code == 1 and "HOST KEY CHANGED" in node["blockers"][0]
    assert f"--trust-host-key {host.fingerprint}" in node["blockers"][0]
    code, out, _ = _cli(capsys, "nodes", "refresh", host.name, "--json", "--trust-host-key", old)
    assert code == 1  # the old fingerprint does not accept the new key
    code, out, _ = _cli(capsys, "nodes", "refresh", host.name, "--json",
                        "--trust-host-key", host.fingerprint)
    assert code == 0 and json.loads(out)[0]["status"] != "UNREACHABLE"
    assert host.host_pubkey.split()[1] in known_hosts_path().read_text()
    assert _cli(capsys, "nodes", "refresh", host.name)[0] == 0  # pinned: no flag needed now


def test_deploy_shells_re_pin_with_the_given_fingerprint(make_test_hosts, capsys):
    # `clusters deploy --trust-host-key` hands the fingerprints to these shells
    (host,) = make_test_hosts(1, prefix=PREFIX, subnet=SUBNET)
    _import(capsys, host)
    host.regenerate_host_key()
    node = get_node(Store(), host.name)
    refused = pool_shells(Store())(node)
    assert "HOST KEY CHANGED" in _error(lambda: refused.run("true"))
    shells = pool_shells(Store(), {host.fingerprint})
    with shells(node) as conn:
        assert conn.run("echo ok").stdout == "ok\n"
    shells.save_pins()
    assert host.host_pubkey.split()[1] in known_hosts_path().read_text()
    code, _, err = _cli(capsys, "clusters", "deploy", "c1", "--nodes", host.name,
                        "--trust-host-key", "SHA256:short", "--dry-run")
    assert code == 2 and "is not a SHA256 fingerprint" in err and err.count("\n") == 1


def _error(action) -> str:
    try:
        action()
    except Exception as exc:  # noqa: BLE001 - the message is what is checked
        return str(exc)
    return ""
