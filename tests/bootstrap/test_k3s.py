"""k3s and Volcano cannot be downloaded here: the exact commands and files rendered for a
3-node cluster are checked, and a bounded wait is run against a real test host."""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml

from core.bootstrap import versions
from core.bootstrap.deploy import build_plan, deploy, token_ref
from core.bootstrap.kubeconfig import cluster_kubeconfig_path
from core.state.cluster_records import get_cluster
from core.domain.records import Node
from core.state.node_records import add_nodes
from core.state.secret_store import SecretStore
from core.state.store import Store
from tests.bootstrap.cluster_hosts import (MESH_SUBNET, PREFIX, SUBNET, ShellFactory,
                                           add_host_nodes)

K3S_YAML = (Path(__file__).parent / "fixtures" / "k3s.yaml").read_text()

HOSTS = ["198.51.100.10", "198.51.100.11", "203.0.113.12"]


def _dry_run(geotrain_home, only, endpoints=None):
    store = Store()
    add_nodes(store, [Node(name=f"gpu{i}", host=h, username="ubuntu",
                           facts={"gpus": [{"vendor": "nvidia", "name": "H100"}]} if i == 2 else {})
                      for i, h in enumerate(HOSTS)])
    plan = build_plan(store, "wan", ["gpu0", "gpu1", "gpu2"], subnet="10.77.0.0/24",
                      endpoints=endpoints)
    events = []
    result = deploy(plan, only=only, dry_run=True, store=store, on_event=events.append)
    return result, events


def _puts(result, node):
    return {r.command.split()[1]: r for r in result.command_log.for_node(node) if r.kind == "put"}


def test_k3s_config_for_three_nodes(geotrain_home):
    result, _ = _dry_run(geotrain_home, ["k3s"], endpoints={"gpu2": "192.0.2.50:51999"})
    server = yaml.safe_load(_puts(result, "gpu0")["/etc/rancher/k3s/config.yaml"].content)
    assert server["node-ip"] == server["advertise-address"] == "10.77.0.1"
    assert server["flannel-iface"] == "wg-geotrain" and server["flannel-backend"] == "vxlan"
    assert server["container-runtime-endpoint"] == "unix:///run/containerd/containerd.sock"
    assert server["token-file"] == "/etc/rancher/k3s/geotrain-token"
    assert "10.77.0.1" in server["tls-san"] and "198.51.100.10" in server["tls-san"]
    assert server["node-external-ip"] == "198.51.100.10" and server["node-name"] == "gpu0"
    assert server["kubelet-arg"] == ["cgroup-driver=systemd"]
    for index, node in ((1, "gpu1"), (2, "gpu2")):
        puts = _puts(result, node)
        agent = yaml.safe_load(puts["/etc/rancher/k3s/config.yaml"].content)
        assert agent["server"] == "https://10.77.0.1:6443"
        assert agent["node-ip"] == f"10.77.0.{index + 1}" and agent["flannel-iface"] == "wg-geotrain"
        assert "token" not in agent and agent["token-file"] == "/etc/rancher/k3s/geotrain-token"
        assert puts["/etc/rancher/k3s/geotrain-token"].content is None  # a secret: not shown
        assert puts["/etc/rancher/k3s/geotrain-token"].command.endswith("mode 600")
        unit = puts["/etc/systemd/system/k3s-agent.service"].content
        assert "ExecStart=/usr/local/bin/k3s agent --config /etc/rancher/k3s/config.yaml" in unit
    # the NAT'd node advertises the public address it is reached at
    gpu2 = yaml.safe_load(_puts(result, "gpu2")["/etc/rancher/k3s/config.yaml"].content)
    assert gpu2["node-external-ip"] == "192.0.2.50"
    assert "MTU 1330" in _puts(result, "gpu1")["/etc/rancher/k3s/config.yaml"].content
    changes = [r.command for r in result.command_log.changes("gpu0")]
    release = versions.K3S_VERSION.replace("+", "%2B")
    assert any(f"releases/download/{release}/k3s" in c and "sha256sum -c" in c for c in changes)
    assert "systemctl enable k3s" in changes and "systemctl restart k3s" in changes


def _texts(result, events, home, store) -> list[str]:
    texts = [r.command + (r.content or "") for r in result.command_log.records]
    texts += [e.message for e in events]
    texts += [p.read_text() for p in home.rglob("*.log")]
    with store.read() as conn:
        texts += [str([tuple(r) for r in conn.execute(f"SELECT * FROM {t}")])
                  for t in ("clusters", "cluster_nodes", "nodes")]
    return texts


def test_join_token_is_absent_from_every_command_and_event(geotrain_home):
    token = SecretStore().put(token_ref("wan"), "f00d" * 16) and "f00d" * 16
    result, events = _dry_run(geotrain_home, None)
    texts = _texts(result, events, geotrain_home, Store())
    assert len(texts) > 50 and all(token not in text for text in texts)
    assert any("token-file" in (r.content or "") for r in result.command_log.records)


def test_volcano_queue_and_device_plugins(geotrain_home):
    result, _ = _dry_run(geotrain_home, ["volcano"])
    changes = [r.command for r in result.command_log.changes("gpu0")]
    # the paired release manifest geotrain ships (v1.15.1), uploaded and applied: no URL for kubectl
    assert any("kubectl" in c and "apply --server-side --force-conflicts -f /var/lib/rancher/k3s/"
               "server/manifests-geotrain/volcano-v1.15.1.yaml" in c for c in changes)
    assert not any("https://" in c for c in changes)
    plugin = yaml.safe_load(_puts(result, "gpu0")[
        "/var/lib/rancher/k3s/server/manifests-geotrain/nvidia-device-plugin-daemonset.yaml"].content)
    assert plugin["spec"]["template"]["spec"]["nodeSelector"] == {"geotrain.io/gpu-vendor": "nvidia"}
    assert any("apply -f /var/lib/rancher/k3s/server/manifests-geotrain/nvidia-device-plugin-"
               "daemonset.yaml" in c for c in changes)
    assert not any("amdgpu" in c for c in changes)
    queue = yaml.safe_load(next(r.content for r in result.command_log.for_node("gpu0")
                                if r.kind == "put" and "queue-geotrain" in r.command))
    assert queue["kind"] == "Queue" and queue["metadata"]["name"] == "geotrain"
    assert queue["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert result.command_log.for_node("gpu1") == []  # Volcano is applied from the server only


def test_no_vpn_uses_host_addresses(geotrain_home):
    store = Store()
    add_nodes(store, [Node(name=f"n{i}", host=h, username="root") for i, h in enumerate(HOSTS)])
    plan = build_plan(store, "lan", ["n0", "n1", "n2"], vpn=False)
    result = deploy(plan, only=["k3s"], dry_run=True, store=store)
    agent = yaml.safe_load(_puts(result, "n1")["/etc/rancher/k3s/config.yaml"].content)
    assert agent["server"] == "https://198.51.100.10:6443" and agent["node-ip"] == "198.51.100.11"
    assert "flannel-iface" not in agent


STAND_IN = """#!/bin/sh
# A stand-in for a k3s whose API server never comes up (k3s itself cannot be downloaded here).
case "$1" in
  --version) echo "k3s version v1.35.5+k3s1 (stand-in)";;
  server|agent) exec sleep 3600;;
  *) exit 1;;
esac
"""


def test_waits_are_bounded_and_say_what_they_waited_for(make_test_hosts, geotrain_home, tmp_path):
    hosts = make_test_hosts(1, prefix=PREFIX, subnet=SUBNET)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "k3s").write_text(STAND_IN)
    store = Store()
    names = add_host_nodes(store, hosts)
    plan = build_plan(store, "slow", names, subnet=MESH_SUBNET)
    plan.k3s.bundle, plan.k3s.api_timeout = str(bundle), 3
    plan.k3s.sha256 = {"k3s": hashlib.sha256(STAND_IN.encode()).hexdigest()}  # a stand-in: its own
    plan.k3s.bin_dir, plan.k3s.config_dir = "/run/geotrain/bin", "/run/geotrain/k3s"
    events = []
    result = deploy(plan, only=["k3s"], shell_factory=ShellFactory(hosts), store=store,
                    on_event=events.append)
    [failure] = result.summary.failures
    assert (failure.node, failure.step, failure.phase) == (hosts[0].name, "k3s", "server")
    assert failure.message == (f"gave up after 3s waiting for the Kubernetes API "
                               f"(https://10.203.0.1:6443/readyz) on {hosts[0].name}")
    assert any(e.state == "failed" and "gave up after 3s" in e.message for e in events)
    assert "k3s server --config /run/geotrain/k3s/config.yaml" in hosts[0].run("ps -eww -o args").stdout
    token = SecretStore().get(token_ref("slow"))
    assert hosts[0].run("cat /run/geotrain/k3s/geotrain-token").stdout.strip() == token
    assert hosts[0].run("stat -c %a /run/geotrain/k3s/geotrain-token").stdout.strip() == "600"
    assert token not in hosts[0].run("ps -eww -o args").stdout
    texts = _texts(result, events, geotrain_home, store)
    assert any(p.name == f"{hosts[0].name}.log" for p in geotrain_home.rglob("*.log"))
    assert all(token not in text for text in texts)
    assert oct((geotrain_home / "secrets.json").stat().st_mode & 0o777) == "0o600"


def test_kubeconfig_is_fetched_rewritten_and_stored(make_test_hosts, geotrain_home):
    hosts = make_test_hosts(1, prefix=PREFIX, subnet=SUBNET)
    hosts[0].run(f"mkdir -p /run/geotrain/k3s && cat > /run/geotrain/k3s/k3s.yaml <<'EOF'\n"
                 f"{K3S_YAML}EOF")
    store = Store()
    plan = build_plan(store, "kc", add_host_nodes(store, hosts), subnet=MESH_SUBNET)
    plan.k3s.config_dir = "/run/geotrain/k3s"
    result = deploy(plan, only=["kubeconfig"], shell_factory=ShellFactory(hosts), store=store)
    assert result.summary.ok, result.summary.lines()
    path = cluster_kubeconfig_path("kc")
    assert get_cluster(store, "kc").kubeconfig_path == str(path)
    data = yaml.safe_load(path.read_text())
    assert data["clusters"][0]["cluster"]["server"] == f"https://{hosts[0].ip}:6443"
    assert data["current-context"] == "kc" and path.stat().st_mode & 0o777 == 0o600
    assert all("S0VZCg==" not in r.command for r in result.command_log.records)
    log = next(geotrain_home.rglob(f"{hosts[0].name}.log")).read_text()
    assert "S0VZCg==" not in log  # the client key is not logged


def test_mesh_comes_back_at_boot_where_systemd_runs(geotrain_home):
    result, _ = _dry_run(geotrain_home, ["wireguard"])
    conf = _puts(result, "gpu1")["/etc/wireguard/wg-geotrain.conf"]
    assert conf.command.endswith("mode 600")
    text = conf.content
    assert "Address = 10.77.0.2/24" in text and "MTU = 1380" in text
    assert "PostUp = wg set %i private-key /etc/wireguard/geotrain.key" in text
    assert "PrivateKey" not in text and text.count("[Peer]") == 2
    assert "Endpoint = 198.51.100.10:51820" in text and "AllowedIPs = 10.77.0.1/32" in text
    assert "systemctl enable wg-quick@wg-geotrain" in [
        r.command for r in result.command_log.changes("gpu1")]


READY_STAND_IN = """#!/bin/sh
# A stand-in for k3s whose API answers and lists one node, Ready once {flag} exists.
case "$1" in
  --version) echo "k3s version v1.35.5+k3s1 (stand-in)";;
  server|agent) exec sleep 3600;;
  kubectl) case "$*" in
      *readyz*) exit 0;;
      *"get nodes"*) if [ -e {flag} ]; then echo {node}=True; else echo {node}=False; fi;;
      *) exit 1;;
    esac;;
  *) exit 1;;
esac
"""


def test_success_only_when_every_node_is_ready(make_test_hosts, geotrain_home, tmp_path):
    hosts = make_test_hosts(1, prefix=PREFIX, subnet=SUBNET)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    flag = "/run/geotrain/node-ready"
    (bundle / "k3s").write_text(READY_STAND_IN.format(flag=flag, node=hosts[0].name))
    store = Store()
    plan = build_plan(store, "ready", add_host_nodes(store, hosts), subnet=MESH_SUBNET)
    plan.k3s.bundle, plan.k3s.api_timeout, plan.k3s.ready_timeout = str(bundle), 3, 3
    plan.k3s.sha256 = {"k3s": hashlib.sha256((bundle / "k3s").read_bytes()).hexdigest()}
    plan.k3s.bin_dir, plan.k3s.config_dir = "/run/geotrain/bin", "/run/geotrain/k3s"
    factory = ShellFactory(hosts)
    first = deploy(plan, only=["k3s"], shell_factory=factory, store=store)
    [failure] = first.summary.failures
    assert (failure.step, failure.phase) == ("k3s", "ready")
    assert failure.message == (f"gave up after 3s waiting for nodes {hosts[0].name} to be Ready"
                               f" on {hosts[0].name}")
    hosts[0].run(f"touch {flag}")
    second = deploy(plan, only=["k3s"], shell_factory=factory, store=store)
    assert second.summary.ok, second.summary.lines()
    third = deploy(plan, only=["k3s"], shell_factory=factory, store=store)
    assert third.summary.ok and third.command_log.changes() == []
