"""k3s: the server on the first node, agents on the rest, all on the mesh addresses.

Flags go in a config file (`--config`), never on argv; the join token is a 0600 file
(`token-file`) written over SFTP. k3s uses our containerd (`container-runtime-endpoint`)
and flannel's VXLAN runs over the mesh interface, whose MTU leaves VXLAN's 50 bytes.
Every wait is bounded and its message names the node and what it waited for.
"""

from __future__ import annotations

import ipaddress
import shlex
import socket
from pathlib import Path

import yaml

from core.bootstrap import bundle_images, checksums, failures, services, versions
from core.bootstrap.containerd import SOCKET
from core.bootstrap.plan import VXLAN_OVERHEAD, ClusterPlan, DeployContext, NodeSpec, NodeTarget
from core.bootstrap.runner import Phase, Step
from core.bootstrap.session import StepFailed
from core.domain.datacenters import ZONE_LABEL
from core.nodes.facts import gpus
from core.schema.endpoints import host_port, is_ip

CONFIG_DIR = "/etc/rancher/k3s"
IMAGES_DIR = "/var/lib/rancher/k3s/agent/images"
API_PORT = 6443
GPU_VENDOR_LABEL = "geotrain.io/gpu-vendor"  # set from the facts; device plugins select on it


class _NoAliasDumper(yaml.SafeDumper):
    """Plain YAML for files and --dry-run: a value used twice is written twice, never `&id001`."""

    def ignore_aliases(self, data) -> bool:
        return True


def dump(data) -> str:
    return yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=True)


def config_path(plan: ClusterPlan) -> str:
    return f"{plan.k3s.config_dir}/config.yaml"


def token_path(plan: ClusterPlan) -> str:
    return f"{plan.k3s.config_dir}/geotrain-token"


def kubectl(plan: ClusterPlan) -> str:
    return (f"{shlex.quote(plan.k3s.bin_dir + '/k3s')} kubectl --kubeconfig "
            f"{shlex.quote(plan.k3s.config_dir + '/k3s.yaml')}")


def resolve_host(name: str) -> list[str]:
    """The addresses `name` resolves to here, IPv4 first, sorted (deterministic); [] if none."""
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, ValueError):
        return []
    found = {ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos}
    return [str(a) for a in sorted(found, key=lambda a: (a.version, int(a)))]


def public_host(spec: NodeSpec) -> str:
    """The host peers reach the node at: the endpoint override's host, else the node's host."""
    endpoint = spec.endpoint
    if not endpoint:
        return spec.host
    if endpoint.startswith("["):
        return endpoint[1:endpoint.index("]")]
    return endpoint.rsplit(":", 1)[0] if endpoint.count(":") == 1 else endpoint


def external_ips(spec: NodeSpec, seen_public: str | None = None) -> list[str]:
    """k3s's node-external-ip takes IP addresses only ("invalid ip format" for a name).

    A name is resolved here (IPv4 first); where it does not resolve here (e.g. only behind
    a jump host), the public address the node's facts saw; else a one-line error.
    """
    host = spec.external_ip or public_host(spec)
    if is_ip(host):
        return [host]
    addresses = resolve_host(host) or ([seen_public] if seen_public and is_ip(seen_public)
                                       else [])
    if not addresses:
        raise StepFailed(f"{spec.name}: its public host {host!r} does not resolve to an address, "
                         "and k3s needs an IP for node-external-ip: make the name resolve on "
                         "this machine, or give the node its public IP (--endpoint NODE=IP)")
    return addresses[:1]


def node_ip(plan: ClusterPlan, spec: NodeSpec) -> str:
    """node-ip / advertise-address take IPs: the mesh IP, or (no mesh) the host resolved here."""
    address = plan.address(spec)
    if is_ip(address):
        return address
    found = resolve_host(address)
    if not found:
        raise StepFailed(f"{spec.name}: its host {address!r} does not resolve to an address, and "
                         "k3s needs an IP for node-ip: make the name resolve on this machine, or "
                         "register the node by its IP")
    return found[0]


def api_host(plan: ClusterPlan) -> str:
    """The host the stored kubeconfig uses for the API: the server as the user reaches it."""
    return plan.server.host


def api_url(plan: ClusterPlan) -> str:
    host = api_host(plan)
    return f"https://{host_port(host, API_PORT)}"


def tls_sans(plan: ClusterPlan, spec: NodeSpec, public: list[str]) -> list[str]:
    """Every name and address the API is reached at, so the kubeconfig's server always matches."""
    names = {plan.address(spec), spec.host, public_host(spec), *public}
    return sorted(names)


def _minor(k3s_version: str) -> tuple[int, int]:
    major, minor = versions.k8s_minor(k3s_version).split(".")
    return int(major), int(minor)


def node_flags(plan: ClusterPlan, target: NodeTarget) -> dict:
    """The k3s configuration of one node (keys are k3s flag names)."""
    spec = target.spec
    address = node_ip(plan, spec)
    flags: dict = {"node-name": spec.name, "node-ip": address,
                   "container-runtime-endpoint": f"unix://{SOCKET}",
                   "token-file": token_path(plan)}
    public = external_ips(spec, target.facts.get("pool_public_ip"))
    behind_nat = spec.external_ip or (public[0] not in target.facts.get("addresses", public))
    if behind_nat or (plan.vpn and address != public[0]):
        flags["node-external-ip"] = public[0]
    if plan.vpn:
        flags["flannel-iface"] = plan.interface
    kubelet = ["cgroup-driver=systemd"] if target.facts.get("init", {}).get("systemd") else []
    if target.facts.get("cgroup", {}).get("version") == 1 and _minor(plan.k3s.version) >= (1, 35):
        # Kubernetes 1.35's kubelet refuses cgroup v1 hosts by default (KEP-5573,
        # kubernetes/kubernetes#134298: failCgroupV1 true); v1 is unsupported upstream from then
        # on, but runs when the kubelet is told so (its --fail-cgroupv1 flag, from 1.31)
        kubelet.append("fail-cgroupv1=false")
    if kubelet:
        flags["kubelet-arg"] = kubelet
    labels = node_labels(target)
    if labels:
        flags["node-label"] = [f"{key}={value}" for key, value in labels.items()]
    if spec.role == "server":
        flags.update({"advertise-address": address, "tls-san": tls_sans(plan, spec, public),
                      "write-kubeconfig": f"{plan.k3s.config_dir}/k3s.yaml",
                      "write-kubeconfig-mode": "0600", "flannel-backend": "vxlan",
                      "disable": ["traefik"]})
    else:
        flags["server"] = f"https://{host_port(plan.address(plan.server), API_PORT)}"
    return flags


def node_labels(target: NodeTarget) -> dict[str, str]:
    """The labels geotrain puts on a node: its GPU vendor and its datacenter (zone)."""
    vendor, labels = gpu_vendor(target.facts), {}
    if vendor:
        labels[GPU_VENDOR_LABEL] = vendor
    if target.spec.datacenter:
        labels[ZONE_LABEL] = target.spec.datacenter
    return labels


def gpu_vendor(facts: dict) -> str | None:
    """The value of the GPU-vendor node label the device plugins select on."""
    vendors = gpus.vendors(facts)
    return "nvidia" if "nvidia" in vendors else "amd" if "amd" in vendors else None


def render_config(plan: ClusterPlan, target: NodeTarget) -> str:
    head = f"# Written by geotrain for cluster {plan.name} ({target.spec.role}).\n"
    if plan.vpn:
        head += (f"# Pods get MTU {plan.mtu - VXLAN_OVERHEAD}: flannel's VXLAN takes "
                 f"{VXLAN_OVERHEAD} bytes off {plan.interface}'s {plan.mtu}.\n")
    return head + dump(node_flags(plan, target))


def service_command(plan: ClusterPlan, role: str) -> list[str]:
    return [f"{plan.k3s.bin_dir}/k3s", "server" if role == "server" else "agent",
            "--config", config_path(plan)]


def unit_fields(role: str) -> dict[str, list[str]]:
    """[Service] settings as k3s's install.sh writes them (create_systemd_service_file)."""
    return {"Type": ["notify" if role == "server" else "exec"], "KillMode": ["process"],
            "Delegate": ["yes"], "LimitNOFILE": ["1048576"], "LimitNPROC": ["infinity"],
            "LimitCORE": ["infinity"], "TasksMax": ["infinity"], "TimeoutStartSec": ["0"],
            "Restart": ["always"], "RestartSec": ["5s"],
            "ExecStartPre": ["-/sbin/modprobe br_netfilter", "-/sbin/modprobe overlay"]}


def render_unit(plan: ClusterPlan, role: str) -> str:
    """k3s's unit. With the mesh, k3s binds node-ip and flannel-iface to the WireGuard interface,
    so it starts after wg-quick@IFACE (wireguard_boot enables it): Wants= pulls it in, After=
    orders the start (systemd.unit(5)); without it k3s restart-loops at boot until the mesh is up."""
    service = "".join(f"{key}={value}\n" for key, values in unit_fields(role).items()
                      for value in values)
    exec_start = " ".join(shlex.quote(part) for part in service_command(plan, role))
    needs = "network-online.target containerd.service" + (f" wg-quick@{plan.interface}.service" if plan.vpn else "")
    return ("[Unit]\nDescription=Lightweight Kubernetes (k3s, geotrain)\n"
            f"Documentation=https://k3s.io\nWants={needs}\n"
            f"After={needs}\n\n[Install]\n"
            "WantedBy=multi-user.target\n\n[Service]\n"
            f"{service}ExecStart={exec_start}\n")


def unit_name(role: str) -> str:
    return "k3s" if role == "server" else "k3s-agent"


def bundle_files(bundle: Path, arch: str) -> tuple[Path, Path | None]:
    """The air-gap bundle's binary and plain-tar images for `arch` (images may be absent:
    the nodes then pull them), or a one-line error naming the files expected."""
    binary, images = bundle / versions.k3s_asset(arch), bundle / versions.airgap_images(arch)
    if arch == "amd64" and not binary.is_file():
        binary = bundle / "k3s"
    expected = (f"put the release's {versions.k3s_asset(arch)} and {versions.airgap_images(arch)}"
                " there (the plain .tar: `ctr images import` does not read .tar.zst)")
    if not binary.is_file():
        raise StepFailed(f"air-gap bundle {bundle} has no {binary.name} for {arch}: {expected}")
    if images.is_file():
        return binary, images
    compressed = sorted(p.name for p in bundle.glob(f"{images.name}.*"))
    if compressed:
        raise StepFailed(f"air-gap bundle {bundle} has {compressed[0]} but not "
                         f"{images.name}: {expected}")
    return binary, None


def _install(ctx: DeployContext, target: NodeTarget) -> str:
    plan, session = ctx.plan, target.session
    binary = f"{plan.k3s.bin_dir}/k3s"
    have = session.fact(f"{shlex.quote(binary)} --version 2>/dev/null | head -1").stdout
    if plan.k3s.version in have.split():
        return f"k3s {plan.k3s.version} present"
    arch = _arch(target)
    want = checksums.expected(plan.k3s, versions.k3s_asset(arch))
    if not (plan.k3s.bundle or want or plan.k3s.insecure_skip_checksum or session.dry_run):
        raise StepFailed(checksums.missing_message(plan.k3s, versions.k3s_asset(arch)))
    if session.dry_run and not (want or plan.k3s.insecure_skip_checksum):
        want = f"no-sha256-known-for-{versions.k3s_asset(arch)}"  # shown as the real run refuses
    blobs = _bundle_blobs(plan, arch, session.dry_run) if plan.k3s.bundle else None
    target.facts["k3s_changed"] = True  # a new binary: the service restarts on it
    session.change(f"mkdir -p {shlex.quote(plan.k3s.bin_dir)} {IMAGES_DIR}",
                   what="creating k3s dirs")
    if blobs:
        (local, data), images = blobs[0], blobs[1]
        session.put(binary, data, mode=0o755)
        if images is None:
            return f"k3s installed from bundle {plan.k3s.bundle} ({arch}; images pulled)"
        remote = f"{IMAGES_DIR}/{images[0].name}"
        session.put(remote, images[1], mode=0o644)
        session.change(f"ctr --address {SOCKET} -n k8s.io images import {shlex.quote(remote)}",
                       timeout=900, what=f"importing {images[0].name}")
        return f"k3s installed from bundle {plan.k3s.bundle} ({arch})"
    failures.download(session, download_command(plan.k3s.version, arch, binary, want),
                      f"downloading k3s ({arch})", arch)
    return f"k3s {plan.k3s.version} downloaded ({arch})"


def _bundle_blobs(plan: ClusterPlan, arch: str, dry_run: bool):
    """((binary, bytes), (images, bytes) or None): read once and, in a real run, checked
    against the known sha256 before anything reaches the node."""
    local, images = bundle_files(Path(plan.k3s.bundle), arch)
    blobs = [(path, path.read_bytes()) for path in (local, images) if path is not None]
    for path, data in blobs if not dry_run else ():
        checksums.check_bytes(plan.k3s, path.name, data, f"air-gap bundle file {path}")
    return blobs[0], (blobs[1] if images is not None else None)


def download_command(version: str, arch: str, binary: str, want: str | None) -> str:
    """Fetch the `arch` binary and check it against its known sha256 (`want`); None (only
    with --insecure-skip-checksum): against the release's own checksum list."""
    url, sums = versions.k3s_urls(version, arch)
    asset, part = versions.k3s_asset(arch), shlex.quote(binary + ".download")
    own_list = (f"curl -sfL --retry 3 {shlex.quote(sums)} | grep {shlex.quote(' ' + asset + '$')}"
                f" | sed {shlex.quote('s# ' + asset + '$# ' + binary + '.download#')} | sha256sum -c -")
    return (f"curl -sfL --retry 3 -o {part} {shlex.quote(url)}"
            f" && {checksums.verify_download(want, part, own_list)}"
            f" && chmod 755 {part} && mv {part} {shlex.quote(binary)}")


def _arch(target: NodeTarget) -> str:
    target.gather_facts()
    try:
        return versions.release_arch(target.facts.get("system", {}).get("arch"))
    except versions.UnsupportedArch as exc:
        raise StepFailed(f"{target.name}: {exc}: use an amd64 or arm64 server") from None


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
    url = f"https://{host_port(plan.address(target.spec), API_PORT)}/readyz"
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
    relabelled = _label_zones(ctx, target, names)
    return f"{len(names)} node(s) Ready" + (f", {relabelled} zone label(s) set" if relabelled else "")


def _label_zones(ctx: DeployContext, target: NodeTarget, names: list[str]) -> int:
    """k3s applies `node-label` only when a node registers (docs.k3s.io/cli/agent): a node that
    joined before it had (or changed) its datacenter gets the zone label with kubectl."""
    command, key, done = kubectl(ctx.plan), ZONE_LABEL.replace(".", "\\."), 0
    for node in ctx.targets.values():
        zone = node.spec.datacenter
        if not zone or node.name not in names:
            continue
        have = target.session.fact(f"{command} get node {shlex.quote(node.name)} -o jsonpath="
                                   f"'{{.metadata.labels.{key}}}' 2>/dev/null")
        if have.ok and have.stdout.strip() == zone:
            continue
        target.session.change(f"{command} label node {shlex.quote(node.name)} "
                              f"{shlex.quote(f'{ZONE_LABEL}={zone}')} --overwrite >/dev/null",
                              what=f"labelling {node.name} with datacenter {zone}")
        done += 1
    return done


def _only_server(ctx: DeployContext, alive: list[NodeTarget]) -> list[NodeTarget]:
    ctx.put_shared("k3s_live", [t.name for t in alive])
    return [t for t in alive if t.spec.role == "server"]


def _only_agents(ctx: DeployContext, alive: list[NodeTarget]) -> list[NodeTarget]:
    ctx.put_shared("k3s_server_ok", [t.name for t in alive if t.spec.role == "server"])
    return [t for t in alive if t.spec.role != "server"]


STEP = Step("k3s", [Phase("install", _install), Phase("bundle images", bundle_images.import_phase),
                    Phase("configure", _configure),
                    Phase("server", _server, _only_server), Phase("agents", _agent, _only_agents),
                    Phase("ready", _ready, _only_server)])
