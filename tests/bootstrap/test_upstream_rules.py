"""What k3s, containerd and Volcano accept, encoded from their own sources (cited per test).

k3s, containerd and Volcano cannot run here: these tests hold the rendered commands and
files to upstream's rules, so our stand-ins cannot agree with our mistakes.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from pathlib import Path

import pytest
import yaml

from core.bootstrap import containerd, k3s, preflight, versions, volcano
from core.bootstrap.deploy import build_plan, deploy
from core.bootstrap.plan import ClusterPlan, DeployContext, NodeSpec, NodeTarget
from core.bootstrap.session import CommandLog, NodeSession, StepFailed
from core.kubernetes.manifests import manifests_yaml
from core.domain.records import Node
from core.state.node_records import add_nodes
from core.state.store import Store
from core.kubernetes.admission import admission_errors

# k3s server/agent flags that take IP addresses only; a host name there fails with
# "invalid ip format". Source: https://docs.k3s.io/cli/server and /cli/agent
# ("--node-ip value  IPv4/IPv6 addresses to advertise for node", "--node-external-ip",
# "--advertise-address  IPv4/IPv6 address that apiserver uses to advertise",
# "--bind-address  k3s bind address"); names go in "--tls-san  Add additional hostnames
# or IPv4/IPv6 addresses as Subject Alternative Names on the server TLS cert".
IP_FLAGS = ("node-ip", "node-external-ip", "advertise-address", "bind-address")

# k3s-io/k3s install.sh, create_systemd_service_file() and the SYSTEMD_TYPE choice
# ("notify" for server, "exec" for agent): the [Service] settings of the unit it writes.
UPSTREAM_SERVICE = {"KillMode": ["process"], "Delegate": ["yes"], "LimitNOFILE": ["1048576"],
                    "LimitNPROC": ["infinity"], "LimitCORE": ["infinity"],
                    "TasksMax": ["infinity"], "TimeoutStartSec": ["0"], "Restart": ["always"],
                    "RestartSec": ["5s"],
                    "ExecStartPre": ["-/sbin/modprobe br_netfilter", "-/sbin/modprobe overlay"]}


def _node(name, host, arch="x86_64", gpus=()):
    return Node(name=name, host=host, username="root",
                facts={"system": {"arch": arch}, "gpus": [{"vendor": g, "name": g} for g in gpus]})


def _dry_run(nodes, only=None, endpoints=None, bundle=None):
    store = Store()
    add_nodes(store, nodes)
    plan = build_plan(store, "up", [n.name for n in nodes], subnet="10.77.0.0/24",
                      endpoints=endpoints)
    plan.k3s.bundle = bundle
    return deploy(plan, only=only, dry_run=True, store=store)


def _puts(result, node):
    return {r.command.split()[1]: r.content for r in result.command_log.for_node(node)
            if r.kind == "put"}


def _config(result, node):
    return yaml.safe_load(_puts(result, node)["/etc/rancher/k3s/config.yaml"])


def test_ip_flags_hold_addresses_and_names_stay_in_tls_san(geotrain_home, monkeypatch):
    # a stand-in for DNS (no resolver with these names here): gpu1.example.com -> 192.0.2.7
    monkeypatch.setattr(k3s, "resolve_host",
                        lambda name: {"gpu1.example.com": ["192.0.2.7"]}.get(name, []))
    result = _dry_run([_node("gpu0", "gpu1.example.com"), _node("gpu1", "198.51.100.11")],
                      only=["k3s"])
    for node in ("gpu0", "gpu1"):
        config = _config(result, node)
        for flag in IP_FLAGS:
            values = config.get(flag, [])
            for value in values if isinstance(values, list) else [values]:
                ipaddress.ip_address(value)  # raises on a host name, as k3s does
    server = _config(result, "gpu0")
    assert server["node-external-ip"] == "192.0.2.7"
    no_mesh = ClusterPlan("lan", [NodeSpec("gpu0", "gpu1.example.com", "server")], vpn=False)
    assert k3s.node_ip(no_mesh, no_mesh.server) == "192.0.2.7"
    assert "gpu1.example.com" in server["tls-san"] and "192.0.2.7" in server["tls-san"]


def test_a_name_that_does_not_resolve_is_one_line_naming_the_node():
    spec = NodeSpec(name="gpu9", host="gpu9.invalid")  # .invalid never resolves (RFC 6761)
    with pytest.raises(StepFailed) as caught:
        k3s.external_ips(spec)
    message = str(caught.value)
    assert message.startswith("gpu9: its public host 'gpu9.invalid' does not resolve")
    assert "--endpoint NODE=IP" in message and "\n" not in message
    assert k3s.resolve_host("localhost")[0] == "127.0.0.1"  # the real resolver, IPv4 first
    # a name only a jump host resolves: the public address the node's facts saw
    assert k3s.external_ips(spec, seen_public="203.0.113.77") == ["203.0.113.77"]


def test_tls_san_holds_the_kubeconfig_server_with_an_endpoint_override(geotrain_home):
    result = _dry_run([_node("gpu0", "198.51.100.10"), _node("gpu1", "198.51.100.11")],
                      only=["k3s"], endpoints={"gpu0": "203.0.113.5:51820"})
    sans = _config(result, "gpu0")["tls-san"]
    plan = ClusterPlan("up", [NodeSpec("gpu0", "198.51.100.10", "server",
                                       endpoint="203.0.113.5:51820")])
    assert k3s.api_url(plan) == "https://198.51.100.10:6443"
    assert {"198.51.100.10", "203.0.113.5"} <= set(sans)
    v6 = ClusterPlan("v6", [NodeSpec("s", "2001:db8::3", "server")])
    assert k3s.api_url(v6) == "https://[2001:db8::3]:6443"


def _unit_fields(text):
    fields: dict[str, list[str]] = {}
    section = ""
    for line in text.splitlines():
        if line.startswith("["):
            section = line
        elif "=" in line and section == "[Service]":
            key, _, value = line.partition("=")
            fields.setdefault(key, []).append(value)
    return fields


@pytest.mark.parametrize("role, kind", [("server", "notify"), ("agent", "exec")])
def test_units_match_upstream_install_sh(role, kind):
    plan = ClusterPlan("up", [NodeSpec("gpu0", "198.51.100.10", "server")])
    fields = _unit_fields(k3s.render_unit(plan, role))
    assert fields.pop("Type") == [kind]
    assert fields.pop("ExecStart") == [f"/usr/local/bin/k3s {role} --config "
                                       "/etc/rancher/k3s/config.yaml"]
    assert fields == UPSTREAM_SERVICE


def _bundle(tmp_path, *names):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    for name in names:
        (bundle / name).write_bytes(b"x")
    return bundle


def test_airgap_imports_the_plain_tar_never_zstd(tmp_path):
    # `ctr images import` reads a tar stream (containerd cmd/ctr/commands/images/import.go);
    # k3s publishes k3s-airgap-images-<arch>.tar beside .tar.gz/.tar.zst
    # (https://docs.k3s.io/installation/airgap): only the plain .tar is imported.
    zst_only = _bundle(tmp_path, "k3s", "k3s-airgap-images-amd64.tar.zst")
    with pytest.raises(StepFailed) as caught:
        k3s.bundle_files(zst_only, "amd64")
    assert "k3s-airgap-images-amd64.tar" in str(caught.value) and "not read .tar.zst" in str(
        caught.value)
    (zst_only / "k3s-airgap-images-amd64.tar").write_bytes(b"x")
    assert k3s.bundle_files(zst_only, "amd64")[1].name == "k3s-airgap-images-amd64.tar"


def test_airgap_import_command_names_the_tar(geotrain_home, tmp_path):
    bundle = _bundle(tmp_path, "k3s-arm64", "k3s-airgap-images-arm64.tar")
    result = _dry_run([_node("gpu0", "198.51.100.10", arch="aarch64")], only=["k3s"],
                      bundle=str(bundle))
    changes = [r.command for r in result.command_log.changes("gpu0")]
    assert ("ctr --address /run/containerd/containerd.sock -n k8s.io images import "
            "/var/lib/rancher/k3s/agent/images/k3s-airgap-images-arm64.tar") in changes
    assert not any(".zst" in c for c in changes)


# containerd/containerd RELEASES.md, "Kubernetes Support": 1.31 -> 2.1.0+, 2.0.0+, 1.7.20+,
# 1.6.34+; 1.32 -> 1.7.24+, 1.6.36+; v1.4 speaks CRI v1alpha2 only (deprecated table).
@pytest.mark.parametrize("have, k3s_version, ok", [
    ("1.6.20~ds1", "v1.31.4+k3s1", False),  # Debian 12
    ("1.4.13~ds1", "v1.31.4+k3s1", False),  # Debian 11: no CRI v1
    ("1.6.33", "v1.31.4+k3s1", False), ("1.6.34", "v1.31.4+k3s1", True),
    ("1.7.19", "v1.31.4+k3s1", False), ("1.7.20", "v1.31.4+k3s1", True),
    ("2.0.0", "v1.31.4+k3s1", True), ("1.7.23", "v1.32.0+k3s1", False),
    ("1.7.24", "v1.32.0+k3s1", True), (None, "v1.31.4+k3s1", False),
])
def test_containerd_floor_per_kubernetes_version(have, k3s_version, ok):
    assert versions.containerd_supported(have, k3s_version) is ok


def test_the_pinned_containerd_meets_the_floor_it_is_installed_for():
    assert versions.containerd_supported(versions.CONTAINERD_VERSION, versions.K3S_VERSION)


def test_preflight_refuses_an_old_containerd_unless_this_run_upgrades_it():
    plan = ClusterPlan("up", [NodeSpec("gpu0", "198.51.100.10", "server")])
    facts = {"containerd": {"installed": True, "version": "1.4.13~ds1"}, "system": {"arch": "x86_64"}}
    [blocker] = preflight.containerd_blockers(plan, facts, ["preflight", "k3s"])
    assert blocker.startswith("containerd 1.4.13~ds1 is not one Kubernetes 1.35 supports")
    assert "include the containerd step" in blocker and "\n" not in blocker
    assert preflight.containerd_blockers(plan, facts, ["preflight", "containerd", "k3s"]) == []
    assert preflight.containerd_blockers(plan, {**facts, "containerd": {"installed": True, "version": "1.7.28"}},
                                         ["preflight", "k3s"]) == []


def _urls(commands):
    return [u for c in commands for u in re.findall(r"https?://[^\s'\"|]+", c)]


def test_every_download_matches_the_node_architecture(geotrain_home):
    # k3s release assets: k3s, k3s-arm64 (https://github.com/k3s-io/k3s/releases); containerd:
    # containerd-<v>-linux-<arch>.tar.gz (https://github.com/containerd/containerd/releases).
    # Each is checked against the sha256 known beforehand, never a list from the same origin.
    nodes = [_node("gpu0", "198.51.100.10"), _node("gh200a", "198.51.100.11", arch="aarch64"),
             _node("gh200b", "198.51.100.12", arch="aarch64")]
    result = _dry_run(nodes, only=["containerd", "k3s"])
    for name, arch in (("gpu0", "amd64"), ("gh200a", "arm64"), ("gh200b", "arm64")):
        urls = _urls(r.command for r in result.command_log.for_node(name))
        assert len(urls) == 2, urls
        other = "arm64" if arch == "amd64" else "amd64"
        assert all(other not in u for u in urls), urls
        assert f"{versions.k3s_urls(versions.K3S_VERSION, arch)[0]}" in urls
        tarball = versions.containerd_tarball(arch)
        assert f"containerd-{versions.CONTAINERD_VERSION}-linux-{arch}.tar.gz" in " ".join(urls)
        commands = " ".join(r.command for r in result.command_log.for_node(name))
        assert versions.RELEASE_SHA256[(versions.CONTAINERD_VERSION, tarball)] in commands
        assert f"no-sha256-known-for-{versions.k3s_asset(arch)}" in commands  # none pinned


def test_an_unknown_architecture_is_a_blocker():
    from core.nodes import blockers as policy

    [blocker] = policy.architecture({"system": {"arch": "riscv64"}}, policy.Context())
    assert blocker.startswith("unsupported architecture riscv64")
    with pytest.raises(versions.UnsupportedArch):
        versions.release_arch("riscv64")


# Volcano v1.11 (paired with Kubernetes 1.31, what clusters built before run):
# pkg/webhooks/admission/jobs/validate/util.go policyActionMap allows AbortJob,
# RestartJob, RestartTask, RestartPod (new in v1.11.0; read at the tag), TerminateJob,
# CompleteJob, ResumeJob; RestartPartition came later. pkg/controllers/job/plugins/factory.go registers ssh, env, svc, tensorflow,
# mpi, pytorch; the ray job plugin came later. v1.15.1 (paired with 1.35, pinned now; read at the
# tag) allows these and RestartPartition, and registers these and hcclrank and ray: geotrain's
# admission keeps to what both accept, so a job renders for either cluster.
V1_11_ACTIONS = ("AbortJob", "RestartJob", "RestartTask", "RestartPod", "TerminateJob", "CompleteJob",
                 "ResumeJob")
V1_11_PLUGINS = ("env", "svc", "ssh", "pytorch", "mpi", "tensorflow")


def _job(action="RestartJob", plugins=("svc",)):
    return {"metadata": {"name": "ws-1"},
            "spec": {"minAvailable": 1, "plugins": {p: [] for p in plugins},
                     "policies": [{"event": "PodFailed", "action": action}],
                     "tasks": [{"name": "worker", "replicas": 1}]}}


def test_volcano_admission_follows_the_pinned_release():
    assert versions.volcano_for(versions.K3S_VERSION) == "v1.15.1"
    assert versions.volcano_for("v1.30.8+k3s1") == "v1.10.0"
    for action in V1_11_ACTIONS:
        assert admission_errors(_job(action=action)) == []
    assert admission_errors(_job(plugins=V1_11_PLUGINS)) == []
    assert "policy action" in admission_errors(_job(action="RestartPartition"))[0]
    assert admission_errors(_job(plugins=("ray",))) == ["unknown plugin 'ray'"]


def test_device_plugins_are_pinned_and_run_only_on_their_vendor(geotrain_home):
    nodes = [_node("gpu0", "198.51.100.10"), _node("gpu1", "198.51.100.11", gpus=["nvidia"]),
             _node("gpu2", "198.51.100.12", gpus=["amd"])]
    result = _dry_run(nodes, only=["k3s", "volcano"])
    assert "node-label" not in _config(result, "gpu0")
    assert _config(result, "gpu1")["node-label"] == ["geotrain.io/gpu-vendor=nvidia"]
    assert _config(result, "gpu2")["node-label"] == ["geotrain.io/gpu-vendor=amd"]
    puts = _puts(result, "gpu0")
    for name, vendor, image in (
            ("nvidia-device-plugin-daemonset", "nvidia", "nvcr.io/nvidia/k8s-device-plugin:v0.19.2"),
            ("amdgpu-device-plugin-daemonset", "amd", "docker.io/rocm/k8s-device-plugin:1.31.0.7")):
        manifest = yaml.safe_load(puts[f"{volcano.REMOTE_DIR}/{name}.yaml"])
        spec = manifest["spec"]["template"]["spec"]
        arch = {} if vendor == "nvidia" else {"kubernetes.io/arch": "amd64"}  # volcano.PLUGIN_ARCHES
        assert spec["nodeSelector"] == {"geotrain.io/gpu-vendor": vendor, **arch}
        assert spec["containers"][0]["image"] == image
    commands = " ".join(r.command for r in result.command_log.records)
    assert "/master/" not in commands and ":latest" not in commands


def test_the_queue_waits_for_the_admission_webhook(geotrain_home):
    result = _dry_run([_node("gpu0", "198.51.100.10")], only=["volcano"])
    commands = [r.command for r in result.command_log.for_node("gpu0")]
    wait = next(i for i, c in enumerate(commands) if "endpoints volcano-admission-service" in c)
    apply = next(i for i, c in enumerate(commands) if "apply -f" in c and "queue-" in c)
    assert wait < apply and commands[wait].startswith("timeout 300 ")


def test_dry_run_yaml_has_no_anchors(geotrain_home):
    shared = {"app": "x"}
    text = manifests_yaml([{"kind": "ConfigMap", "metadata": {"labels": shared},
                            "spec": {"selector": shared}}])
    assert "&id" not in text and "*id" not in text and text.count("app: x") == 2
    assert "&id" not in k3s.dump({"a": shared, "b": shared})


def test_k3s_config_values_never_reach_a_shell_unquoted(tmp_path):
    session = NodeSession("n", None, None, CommandLog(), [], dry_run=True)
    target = NodeTarget(NodeSpec("n", "198.51.100.10", "server"), session,
                        facts={"system": {"arch": "x86_64"}})
    plan = ClusterPlan("up", [target.spec])
    plan.k3s.bin_dir = "/opt/geo bin/$(touch canary)"
    for want, uses in ((None, 3), ("ab" * 32, 4)):  # the release's own list; a known sha256
        assert k3s.download_command(plan.k3s.version, "amd64", plan.k3s.bin_dir + "/k3s", want).count(
            "'/opt/geo bin/$(touch canary)/k3s.download'") == uses
    assert containerd.release_command("arm64", None).startswith(
        "mkdir -p -m 700 /var/lib/geotrain/downloads && curl -sfL --retry 3 -o "
        "/var/lib/geotrain/downloads/containerd-2.3.4-linux-arm64.tar.gz ")
    assert "/tmp" not in containerd.release_command("amd64", "bundle")
    assert Path(k3s.IMAGES_DIR).is_absolute()


def test_preflight_on_a_real_host_refuses_its_debian_containerd_for_k3s(make_test_hosts,
                                                                        geotrain_home):
    """The test hosts run Debian 12's containerd 1.6.20: Kubernetes 1.35 wants 1.7.28+ (no 1.6 line)."""
    from tests.bootstrap.cluster_hosts import PREFIX, SUBNET, ShellFactory, add_host_nodes

    hosts = make_test_hosts(1, prefix=PREFIX, subnet=SUBNET)
    store = Store()
    plan = build_plan(store, "old", add_host_nodes(store, hosts), subnet="10.203.0.0/24")
    plan.k3s.sha256 = {"k3s": "ab" * 32}  # the download's hash is known: only containerd blocks
    result = deploy(plan, only=["preflight", "k3s"], shell_factory=ShellFactory(hosts),
                    store=store)
    [failure] = result.summary.failures
    assert result.summary.blocked and failure.step == "preflight"
    assert re.fullmatch(r"containerd 1\.6\.20\S* is not one Kubernetes 1\.35 supports \(1\.7\.28\+, "
                        r"2\.1\.5\+, 2\.2\.0\+\): include the containerd step so "
                        r"geotrain installs 2\.3\.4, or upgrade it yourself", failure.message)
    assert result.command_log.changes() == []  # a gate: nothing was touched


def test_delete_removes_the_containerd_release_it_installed_unless_packages_are_kept():
    from core.bootstrap.teardown import undo_commands

    session = NodeSession("n", None, None, CommandLog(), [], dry_run=True)
    target = NodeTarget(NodeSpec("n", "198.51.100.10", "server"), session,
                        facts={"init": {"systemd": True}}, state={"containerd_release": "2.3.4"})
    plan = ClusterPlan("up", [target.spec])
    whats = [what for _, what in undo_commands(plan, target, keep_packages=False)]
    removal = whats.index("removing the containerd release geotrain put in")
    assert whats.index("stopping containerd") < removal < whats.index(
        "restarting the owner's containerd")
    assert "removing the containerd release geotrain put in" not in [
        what for _, what in undo_commands(plan, target, keep_packages=True)]


def test_a_cluster_recorded_with_volcano_v1_10_gets_the_release_paired_with_its_k3s(
        geotrain_home):
    from core.state.cluster_records import save_cluster
    from core.domain.records import Cluster

    store = Store()
    add_nodes(store, [_node("gpu0", "198.51.100.10")])
    save_cluster(store, Cluster(name="old", kind="geotrain", status="READY",
                                config={"k3s": {"version": "v1.31.4+k3s1"},
                                        "volcano": {"version": "v1.10.0"}}))
    assert build_plan(store, "old", ["gpu0"]).volcano.version == "v1.11.0"


def test_gpu_nodes_that_joined_earlier_are_labelled_for_their_plugin(geotrain_home):
    # k3s docs (https://docs.k3s.io/cli/agent, "--node-label"): labels are applied only when
    # the node registers, so nodes that joined before get the label with kubectl.
    nodes = [_node("gpu0", "198.51.100.10"), _node("gpu1", "198.51.100.11", gpus=["amd"])]
    result = _dry_run(nodes, only=["volcano"])
    argvs = [shlex.split(r.command) for r in result.command_log.changes("gpu0")]
    assert any(a[4:] == ["label", "node", "gpu1", "geotrain.io/gpu-vendor=amd", "--overwrite",
                         ">/dev/null"] for a in argvs)
    assert not any("gpu0" in a for a in argvs if "label" in a)


def test_the_containerd_release_gets_its_unit_on_a_systemd_node():
    """The static release brings containerd's own unit (containerd/containerd
    containerd.service): without it a distro unit would keep starting the old binary."""
    from core.bootstrap.containerd import UNIT_PATH, _install_release

    for systemd in (True, False):
        log = CommandLog()
        session = NodeSession("n", None, None, log, [], dry_run=True)
        target = NodeTarget(NodeSpec("n", "198.51.100.10", "server"), session,
                            facts={"init": {"systemd": systemd}, "system": {"arch": "x86_64"}})
        ctx = DeployContext(ClusterPlan("up", [target.spec]), {"n": target}, log, secrets={}, dry_run=True)
        _install_release(ctx, target, "amd64")
        commands = [r.command for r in log.records]
        assert (f"put {UNIT_PATH} mode 644" in commands) is systemd
        assert ("systemctl daemon-reload" in commands) is systemd
