"""k3s: the server on the first node, agents on the rest, all on the mesh addresses.

Flags go in a config file (`--config`), never on argv; the join token is a 0600 file
(`token-file`) written over SFTP. k3s uses our containerd (`container-runtime-endpoint`)
and flannel's VXLAN runs over the mesh interface, whose MTU leaves VXLAN's 50 bytes.
Every wait is bounded and its message names the node and what it waited for.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

from core.bootstrap import services
from core.bootstrap.containerd import SOCKET
from core.bootstrap.plan import VXLAN_OVERHEAD, ClusterPlan, DeployContext, NodeTarget
from core.bootstrap.runner import Phase, Step
from core.bootstrap.session import StepFailed

BIN = "/usr/local/bin/k3s"
CONFIG_DIR = "/etc/rancher/k3s"
IMAGES_DIR = "/var/lib/rancher/k3s/agent/images"
RELEASES = "https://github.com/k3s-io/k3s/releases/download"


def config_path(plan: ClusterPlan) -> str:
    return f"{plan.k3s.config_dir}/config.yaml"


def token_path(plan: ClusterPlan) -> str:
    return f"{plan.k3s.config_dir}/geotrain-token"


def kubectl(plan: ClusterPlan) -> str:
    return f"{plan.k3s.bin_dir}/k3s kubectl --kubeconfig {plan.k3s.config_dir}/k3s.yaml"


def node_flags(plan: ClusterPlan, target: NodeTarget) -> dict:
    """The k3s configuration of one node (keys are k3s flag names)."""
    spec = target.spec
    address = plan.address(spec)
    flags: dict = {"node-name": spec.name, "node-ip": address,
                   "container-runtime-endpoint": f"unix://{SOCKET}",
                   "token-file": token_path(plan)}
    public = (spec.endpoint or spec.host).rsplit(":", 1)[0] if spec.endpoint else spec.host
    behind_nat = spec.external_ip or (public not in target.facts.get("addresses", [public]))
    if spec.external_ip or behind_nat or (plan.vpn and address != spec.host):
        flags["node-external-ip"] = spec.external_ip or public
    if plan.vpn:
        flags["flannel-iface"] = plan.interface
    if target.facts.get("init", {}).get("systemd"):
        flags["kubelet-arg"] = ["cgroup-driver=systemd"]
    if spec.role == "server":
        flags.update({"advertise-address": address, "tls-san": sorted({address, public}),
                      "write-kubeconfig": f"{plan.k3s.config_dir}/k3s.yaml",
                      "write-kubeconfig-mode": "0600", "flannel-backend": "vxlan",
                      "disable": ["traefik"]})
    else:
        flags["server"] = f"https://{plan.address(plan.server)}:6443"
    return flags


def render_config(plan: ClusterPlan, target: NodeTarget) -> str:
    head = f"# Written by geotrain for cluster {plan.name} ({target.spec.role}).\n"
    if plan.vpn:
        head += (f"# Pods get MTU {plan.mtu - VXLAN_OVERHEAD}: flannel's VXLAN takes "
                 f"{VXLAN_OVERHEAD} bytes off {plan.interface}'s {plan.mtu}.\n")
    return head + yaml.safe_dump(node_flags(plan, target), sort_keys=True)


def service_command(plan: ClusterPlan, role: str) -> list[str]:
    return [f"{plan.k3s.bin_dir}/k3s", "server" if role == "server" else "agent",
            "--config", config_path(plan)]


def render_unit(plan: ClusterPlan, role: str) -> str:
    return ("[Unit]\nDescription=k3s (geotrain)\nWants=network-online.target containerd.service\n"
            "After=network-online.target containerd.service\n\n[Service]\nType=notify\n"
            f"ExecStart={' '.join(service_command(plan, role))}\nKillMode=process\n"
            "Delegate=yes\nLimitNOFILE=1048576\nRestart=always\nRestartSec=5s\n\n"
            "[Install]\nWantedBy=multi-user.target\n")


def unit_name(role: str) -> str:
    return "k3s" if role == "server" else "k3s-agent"


def _install(ctx: DeployContext, target: NodeTarget) -> str:
    plan, session = ctx.plan, target.session
    binary = f"{plan.k3s.bin_dir}/k3s"
    have = session.fact(f"{binary} --version 2>/dev/null | head -1").stdout
    if plan.k3s.version in have.split():
        return f"k3s {plan.k3s.version} present"
    target.facts["k3s_changed"] = True  # a new binary: the service restarts on it
    session.change(f"mkdir -p {plan.k3s.bin_dir} {IMAGES_DIR}", what="creating k3s dirs")
    if plan.k3s.bundle:
        bundle = Path(plan.k3s.bundle)
        if not (bundle / "k3s").is_file():
            raise StepFailed(f"air-gap bundle {bundle} has no k3s binary: put the release's "
                             "`k3s` and k3s-airgap-images-amd64.tar.zst there")
        session.put(binary, (bundle / "k3s").read_bytes(), mode=0o755)
        for image in sorted(bundle.glob("k3s-airgap-images-*")):
            remote = f"{IMAGES_DIR}/{image.name}"
            session.put(remote, image.read_bytes(), mode=0o644)
            session.change(f"ctr --address {SOCKET} -n k8s.io images import {remote}",
                           timeout=900, what=f"importing {image.name}")
        return f"k3s installed from bundle {bundle}"
    base = f"{RELEASES}/{plan.k3s.version.replace('+', '%2B')}"
    session.change(f"curl -sfL --retry 3 -o {binary}.download {base}/k3s"
                   f" && curl -sfL --retry 3 {base}/sha256sum-amd64.txt | grep ' k3s$'"
                   f" | sed 's# k3s$# {binary}.download#' | sha256sum -c -"
                   f" && chmod 755 {binary}.download && mv {binary}.download {binary}",
                   timeout=900, what="downloading k3s")
    return f"k3s {plan.k3s.version} downloaded"


def _configure(ctx: DeployContext, target: NodeTarget) -> str:
    plan, session = ctx.plan, target.session
    target.gather_facts()
    token = ctx.secrets["k3s-token"]
    changed = session.ensure_file(token_path(plan), token + "\n", mode=0o600, secret=True)
    changed |= session.ensure_file(config_path(plan), render_config(plan, target), mode=0o600)
    if target.facts["init"]["systemd"]:
        unit = f"/etc/systemd/system/{unit_name(target.spec.role)}.service"
        if session.ensure_file(unit, render_unit(plan, target.spec.role)):
            session.change("systemctl daemon-reload", what="reloading systemd")
            changed = True
    target.facts["k3s_changed"] = target.facts.get("k3s_changed", False) or changed
    return "configuration written" if changed else "configuration up to date"


def _start(target: NodeTarget, plan: ClusterPlan, ready: services.Ready | None = None) -> bool:
    role = target.spec.role
    return services.ensure_running(target, unit_name(role), service_command(plan, role),
                                   unit_name(role), restart=target.facts.get("k3s_changed", False),
                                   ready=ready)


def _server(ctx: DeployContext, target: NodeTarget) -> str:
    plan = ctx.plan
    url = f"https://{plan.address(target.spec)}:6443/readyz"
    ready = services.Ready(f"{kubectl(plan)} get --raw=/readyz >/dev/null 2>&1",
                           f"the Kubernetes API ({url})", plan.k3s.api_timeout, interval=2)
    started = _start(target, plan, ready)
    if not started:
        services.wait_until(target, ready.probe, ready.what, ready.timeout, ready.interval)
    return "server started, API answering" if started else "server running, API answering"


def _agent(ctx: DeployContext, target: NodeTarget) -> str:
    if ctx.plan.server.name not in ctx.shared.get("k3s_server_ok", ()):
        raise StepFailed(f"the server {ctx.plan.server.name} is not up, so {target.name} "
                         "cannot join: fix the server and re-run")
    started = _start(target, ctx.plan)
    return "agent started" if started else "agent running"


def _ready(ctx: DeployContext, target: NodeTarget) -> str:
    """Success only when every live node is Ready in the API (a join can look fine and fail)."""
    plan = ctx.plan
    names = sorted(ctx.shared.get("k3s_live", [t.name for t in ctx.targets.values()]))
    query = (f"{kubectl(plan)} get nodes -o jsonpath='{{range .items[*]}}{{.metadata.name}}="
             "{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}'")
    want = " ".join(shlex.quote(f"{n}=True") for n in names)
    probe = f"out=$({query}); for n in {want}; do echo \"$out\" | grep -qx \"$n\" || exit 1; done"
    services.wait_until(target, f"sh -c {shlex.quote(probe)}",
                        f"nodes {', '.join(names)} to be Ready", timeout=plan.k3s.ready_timeout,
                        interval=3)
    return f"{len(names)} node(s) Ready"


def _only_server(ctx: DeployContext, alive: list[NodeTarget]) -> list[NodeTarget]:
    ctx.put_shared("k3s_live", [t.name for t in alive])
    return [t for t in alive if t.spec.role == "server"]


def _only_agents(ctx: DeployContext, alive: list[NodeTarget]) -> list[NodeTarget]:
    ctx.put_shared("k3s_server_ok", [t.name for t in alive if t.spec.role == "server"])
    return [t for t in alive if t.spec.role != "server"]


STEP = Step("k3s", [Phase("install", _install), Phase("configure", _configure),
                    Phase("server", _server, _only_server), Phase("agents", _agent, _only_agents),
                    Phase("ready", _ready, _only_server)])
