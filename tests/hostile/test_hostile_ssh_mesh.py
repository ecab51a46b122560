"""Hostile input to SSH, WireGuard, endpoints, known hosts and node kubeconfigs.

Each case is answered with a one-line error (CLI: exit 2) or taken literally: never a
traceback, never a shell command run (a canary file an injection would create stays
absent), state unchanged.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
import yaml

from core.bootstrap.kubeconfig import rewrite
from core.bootstrap.plan import ClusterPlan, NodeSpec
from core.bootstrap.session import StepFailed
from core.bootstrap.wireguard_mesh import desired_peers, parse_interface
from core.cli import main
from core.schema.endpoints import check_host, check_wg_key, host_port, parse_host_port
from core.errors import InvalidInput
from core.domain.records import Node
from core.state.node_records import add_nodes
from core.nodes.ssh import parse_endpoint
from core.nodes.ssh_config import ssh_config_host
from core.state.store import Store

CANARY = Path("/tmp/geotrain-hostile-canary-h1")
INJECTIONS = [f";touch {CANARY}", f"$(touch {CANARY})", f"`touch {CANARY}`",
              f"\nPostUp = touch {CANARY}", f" && touch {CANARY}", f"|touch {CANARY}"]
K3S_YAML = (Path(__file__).parents[1] / "bootstrap" / "fixtures" / "k3s.yaml").read_text()


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOTRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GEOTRAIN_PUBLIC_IP_URLS", "")
    CANARY.unlink(missing_ok=True)
    yield tmp_path / "home"
    assert not CANARY.exists(), "an injected command ran"


def _one_line_error(capsys, argv, message):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, (argv, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and message in err, err
    return err


def _nodes_table(home):
    Store()
    return sqlite3.connect(home / "state.sqlite3").execute("SELECT * FROM nodes").fetchall()


# -- endpoints and hosts ---------------------------------------------------------------------

@pytest.mark.parametrize("injection", INJECTIONS)
def test_hostile_host_on_import_ssh_is_refused_before_any_connection(capsys, home, injection):
    argv = ["nodes", "import-ssh", "--name", "gpu1", "--endpoint", f"198.51.100.7{injection}",
            "--username", "root", "--connect-timeout", "1"]
    _one_line_error(capsys, argv, "is not")
    assert _nodes_table(home) == []


@pytest.mark.parametrize("injection", INJECTIONS)
def test_hostile_wireguard_endpoint_flag_is_refused(capsys, injection):
    add_nodes(Store(), [Node(name="n0", host="198.51.100.1", username="root")])
    _one_line_error(capsys, ["clusters", "deploy", "c1", "--nodes", "n0", "--dry-run",
                             "--endpoint", f"n0=203.0.113.9:51820{injection}"], "--endpoint n0=")


@pytest.mark.parametrize("field, value, message", [
    ("name", "gpu1\nid", "node name 'gpu1\\nid' is not valid"),
    ("name", "gpu1;id", "is not valid"),
    ("endpoint", "gpu1.example.com\nPostUp = id", "is not HOST"),
    ("endpoint", "-oProxyCommand=touch", "is not HOST"),
    ("endpoint", "[2001:db8::1", "is not HOST"),
    ("endpoint", "10.0.0.1:0", "is not a port number"),
    ("endpoint", "10.0.0.1:99999", "is not a port number"),
    ("endpoint", "fe80::1%eth0;id", "is not HOST"),
    ("username", "root;id", "is not a valid login name"),
    ("username", "$(id)", "is not a valid login name"),
    ("jump", "bastion;touch /tmp/x", "is not [USER@]HOST[:PORT]"),
])
def test_hostile_import_file_fields_are_one_line_errors(capsys, home, tmp_path, field, value, message):
    entry = {"name": "gpu1", "endpoint": "198.51.100.7", "username": "root", field: value}
    servers = tmp_path / "servers.yaml"
    servers.write_text(yaml.safe_dump([entry]))
    _one_line_error(capsys, ["nodes", "import", str(servers), "--connect-timeout", "1"], message)
    assert _nodes_table(home) == []


@pytest.mark.parametrize("name", ["gpu1\n", "c1\n"])
def test_a_name_with_a_trailing_newline_is_refused(capsys, home, name):
    # NAME_RE is `^…$`: re.match accepted "gpu1\n"; fullmatch does not
    _one_line_error(capsys, ["nodes", "import-ssh", "--name", name, "--endpoint", "198.51.100.7",
                             "--username", "root"], "is not valid")
    add_nodes(Store(), [Node(name="n0", host="198.51.100.1", username="root")])
    _one_line_error(capsys, ["clusters", "deploy", name, "--nodes", "n0", "--dry-run"],
                    "is not valid")
    assert [n[0] for n in _nodes_table(home)] == ["n0"]


@pytest.mark.parametrize("text", ["a b", "", "-rf", "x" * 254, "a..b", "1.2.3.4.5\n", "ünï.example"])
def test_check_host_refuses_what_is_neither_an_ip_nor_a_dns_name(text):
    with pytest.raises(InvalidInput) as err:
        check_host(text)
    assert "\n" not in err.value.message


@pytest.mark.parametrize("text, expected", [
    ("2001:db8::3", ("2001:db8::3", 51820)), ("[2001:db8::3]:51999", ("2001:db8::3", 51999)),
    ("gpu1.example.com", ("gpu1.example.com", 51820)), ("203.0.113.9:1", ("203.0.113.9", 1)),
])
def test_endpoints_parse_and_render_ipv6_in_brackets(text, expected):
    host, port = parse_host_port(text, 51820)
    assert (host, port) == expected
    assert host_port(host, port) == (f"[{host}]:{port}" if ":" in host else f"{host}:{port}")


def test_ssh_parse_endpoint_takes_bracketed_ipv6():
    assert parse_endpoint("ubuntu@[2001:db8::3]:2222") == ("ubuntu", "2001:db8::3", 2222)


# -- ssh config ---------------------------------------------------------------------------------

@pytest.mark.parametrize("line, message", [
    ("Port abc", "Port 'abc' is not a port number"),
    ("Port 70000", "Port '70000' is not a port number"),
    ("HostName gpu1;touch /tmp/x", "HostName 'gpu1;touch /tmp/x' is not an IP address"),
])
def test_ssh_config_bad_values_are_one_line_errors(tmp_path, capsys, home, line, message):
    config = tmp_path / "ssh_config"
    config.write_text(f"Host gpu\n  User root\n  {line}\n")
    with pytest.raises(InvalidInput, match=message):
        ssh_config_host("gpu", str(config))
    _one_line_error(capsys, ["nodes", "import", "--from-ssh-config", "gpu", "--ssh-config",
                             str(config)], message)


MATCH_LINES = [f'Match ex""ec "touch {CANARY}"', "Match exec", "Match host x exec y", f"Match exec 'touch {CANARY}'",
               f'Match host gpu exec "touch {CANARY}"', f"Match all\n  ProxyCommand touch {CANARY}"]


@pytest.mark.parametrize("line", MATCH_LINES)
def test_ssh_config_match_blocks_run_nothing_and_do_not_apply(tmp_path, line):
    """paramiko ran `Match exec` (through invoke: the quote trick passed the guard) and raised KeyError on any Match."""
    config = tmp_path / "ssh_config"
    config.write_text(f"{line}\n  HostName 192.0.2.66\n  User evil\nHost gpu\n  HostName 192.0.2.7\n  User root\n")
    notes: list[str] = []
    entry = ssh_config_host("gpu", str(config), notes)
    assert (entry["hostname"], entry["user"]) == ("192.0.2.7", "root")  # the Match block's values are not used
    assert len(notes) == 1 and "`Match` block(s) not evaluated" in notes[0] and "\n" not in notes[0]
    config.write_text(f"Host gpu\n  HostName 192.0.2.7\n{line}\n  User evil\n")  # a Match ends the Host block
    assert ssh_config_host("gpu", str(config))["user"] is None


def test_ssh_config_match_then_a_host_without_user_is_one_line(tmp_path, capsys):
    config = tmp_path / "ssh_config"
    config.write_text(f'Match ex""ec "touch {CANARY}"\n  User x\nHost gpu\n  HostName 192.0.2.7\n')
    _one_line_error(capsys, ["nodes", "import", "--from-ssh-config", "gpu", "--ssh-config", str(config)],
                    "Host gpu has no User")


@pytest.mark.parametrize("text, message", [
    ('Host "gpu\n  HostName 192.0.2.7\n', "line 1 has an unclosed quote"),
    ('Host gpu\n  HostName "192.0.2.7\n', "HostName '\"192.0.2.7' is not an IP address"),
    ("Host gpu\n  =x\n", "line 2 is not `Keyword value`"),
])
def test_ssh_config_lines_it_cannot_read_are_one_line_errors(tmp_path, capsys, text, message):
    config = tmp_path / "ssh_config"
    config.write_text(text)
    _one_line_error(capsys, ["nodes", "import", "--from-ssh-config", "gpu", "--ssh-config", str(config)], message)


# -- WireGuard keys and peers read back from nodes ------------------------------------------

@pytest.mark.parametrize("key", ["", "abc", "A" * 43 + "=\n", "A" * 42 + "B=",
                                 f"$(touch {CANARY})" + "A" * 20, "A" * 43 + "= ; id"])
def test_a_hostile_wireguard_key_is_refused(key):
    with pytest.raises(InvalidInput, match="is not a WireGuard key"):
        check_wg_key(key)


def _ctx(peer_key: str, endpoint: str | None = None):
    from core.bootstrap.plan import DeployContext
    from core.bootstrap.session import CommandLog

    nodes = [NodeSpec("n0", "198.51.100.1", "server", "10.99.0.1"),
             NodeSpec("n1", "198.51.100.2", "agent", "10.99.0.2", endpoint=endpoint)]
    ctx = DeployContext(ClusterPlan("c1", nodes), {}, CommandLog())
    ctx.shared["wg_keys"] = {"n0": "A" * 43 + "=", "n1": peer_key}
    return ctx, type("T", (), {"name": "n0"})()


@pytest.mark.parametrize("key", [f"x $(touch {CANARY})", "A" * 43 + "=\nPostUp = id"])
def test_a_hostile_peer_key_stops_the_mesh_step_with_one_line(key):
    ctx, target = _ctx(key)
    with pytest.raises(StepFailed, match="public key of n1") as err:
        desired_peers(ctx, target)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("endpoint", [f"203.0.113.9\nPostUp = touch {CANARY}",
                                      f"203.0.113.9:51820 $(touch {CANARY})"])
def test_a_hostile_stored_endpoint_stops_the_mesh_step(endpoint):
    ctx, target = _ctx("B" * 42 + "A=", endpoint)
    with pytest.raises(StepFailed, match="endpoint of n1") as err:
        desired_peers(ctx, target)
    assert "\n" not in str(err.value)


def test_peer_lines_that_are_not_keys_are_ignored():
    dump = ("@peers\n$(touch /tmp/x)\t(none)\t1.2.3.4:1\t10.0.0.2/32\t0\t0\t0\t0\n"
            + "C" * 42 + "A=\t(none)\t1.2.3.4:1\t10.0.0.3/32\t0\t0\t0\t25\n")
    assert list(parse_interface(dump).peers) == ["C" * 42 + "A="]


# -- a node's kubeconfig -----------------------------------------------------------------------

def _k3s(**user) -> str:
    data = yaml.safe_load(K3S_YAML)
    data["users"][0]["user"] = user
    return yaml.safe_dump(data)


@pytest.mark.parametrize("text, message", [
    (_k3s(exec={"command": "sh", "args": ["-c", f"touch {CANARY}"]}), "uses an `exec` credential"),
    (_k3s(**{"auth-provider": {"name": "oidc"}}), "uses an `auth-provider` credential"),
    (_k3s(username="admin", password="x"), "has no client certificate or token"),
    (K3S_YAML.replace("clusters:\n-", "clusters:\n  default:\n   ", 1), "must be a list"),
    ("clusters: [just-a-string]\nusers: [x]\n", "must be a list of entries"),
    ("users:\n- name: u\n  user: not-a-mapping\nclusters: []\n", "must be a list of entries"),
    ("- a list\n- not a mapping\n", "is not a kubeconfig mapping"),
    ("clusters: [\n", "is not valid YAML"),
])
def test_a_hostile_node_kubeconfig_is_refused_in_one_line(text, message):
    with pytest.raises(StepFailed, match=message) as err:
        rewrite(text, "c1", "https://[2001:db8::3]:6443", "n0")
    assert "\n" not in str(err.value)


def test_only_known_fields_are_kept_from_a_node_kubeconfig():
    text = K3S_YAML.replace("server: https://127.0.0.1:6443",
                            "server: https://127.0.0.1:6443\n    proxy-url: http://evil:3128")
    data = yaml.safe_load(rewrite(text, "c1", "https://[2001:db8::3]:6443", "n0"))
    assert data["clusters"][0]["cluster"] == {"certificate-authority-data": "Q0EK",
                                              "server": "https://[2001:db8::3]:6443"}
    assert set(data["users"][0]["user"]) == {"client-certificate-data", "client-key-data"}


# -- merging into ~/.kube/config ---------------------------------------------------------------

def _stored_cluster(home):
    from core.bootstrap.kubeconfig import cluster_kubeconfig_path, write_private
    from core.state.cluster_records import save_cluster
    from core.domain.records import Cluster

    path = cluster_kubeconfig_path("c1")
    write_private(path, rewrite(K3S_YAML, "c1", "https://198.51.100.1:6443"))
    save_cluster(Store(), Cluster(name="c1", kind="geotrain", kubeconfig_path=str(path)),
                 create=True)


@pytest.mark.parametrize("content, message", [
    (b"\xff\xfeclusters: []\n", "is not UTF-8 text"),
    (b"clusters:\n  a: b\n", "`clusters` must be a list"),
    (b"clusters: [one, two]\n", "`clusters` must be a list"),
    (b"users: {}\n", "`users` must be a list"),
    (b"contexts:\n- 3\n", "`contexts` must be a list"),
])
def test_merging_into_a_malformed_kubeconfig_is_one_line_and_leaves_it(tmp_path, capsys, home,
                                                                        content, message):
    _stored_cluster(home)
    target = tmp_path / "config"
    target.write_bytes(content)
    _one_line_error(capsys, ["clusters", "import-kubeconfig", "c1", "--kubeconfig-path",
                             str(target)], message)
    assert target.read_bytes() == content and not list(tmp_path.glob("config.backup-*"))
    assert not Path(f"{target}.lock").exists()


def test_a_symlinked_kubeconfig_is_written_through_the_link_under_kubectls_lock(tmp_path, home):
    from core.bootstrap.kubeconfig_import import merge

    _stored_cluster(home)
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "kubeconfig"
    real.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    link = tmp_path / "config"
    link.symlink_to(real)
    merge("c1", link)
    assert link.is_symlink() and os.readlink(link) == str(real)  # still the user's link
    assert "c1" in [c["name"] for c in yaml.safe_load(real.read_text())["clusters"]]
    assert real.stat().st_mode & 0o077 == 0
    for lock in (Path(f"{link}.lock"), Path(f"{real}.lock")):  # kubectl, given either path
        lock.touch()
        with pytest.raises(InvalidInput, match="kubectl or another geotrain is writing"):
            merge("c1", link, force=True)
        lock.unlink()


@pytest.mark.parametrize("content,message", [
    (b"\xff\xfe not utf-8", "is not UTF-8 text"),
    (b"clusters:\n  a: b\ncontexts:\n- name: x\n  context: {cluster: a, user: u}\n"
     b"current-context: x\nusers: [u]\n", "not a usable kubeconfig"),
    (b"clusters: [one, two]\ncontexts: [c]\n", "not a usable kubeconfig"),
    (b"- just\n- a list\n", "not a usable kubeconfig"),
])
def test_registering_a_malformed_kubeconfig_is_one_line(tmp_path, capsys, home, content, message):
    path = tmp_path / "kubeconfig"
    path.write_bytes(content)
    _one_line_error(capsys, ["clusters", "add-kubernetes", "k1", "--kubeconfig", str(path)], message)
