"""containerd: a version the k3s being installed supports, configured for k3s, kept running.

The floor per Kubernetes minor is containerd's own table (see versions.py). A missing or
too old containerd is replaced by the pinned static release for the node's architecture
(downloaded, or `containerd-<v>-linux-<arch>.tar.gz` from the air-gap bundle) in
/usr/local, which comes first on PATH; runc comes from the distribution.

SystemdCgroup follows the init system (the systemd cgroup driver needs systemd as
PID 1); the CNI paths point at the plugins k3s unpacks, so k3s can use this containerd
through --container-runtime-endpoint. NVIDIA nodes get the nvidia runtime as default; GPU
devices are owned by the pod's user (DEVICE_OWNERSHIP).
"""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path

from core.bootstrap import checksums, failures, nvidia_devices, packages, services, versions
from core.bootstrap.plan import DeployContext, NodeTarget
from core.bootstrap.registry_mirrors import CERTS_DIR, hosts_path, hosts_toml
from core.bootstrap.runner import Phase, Step
from core.bootstrap.session import StepFailed, file_state
from core.nodes.facts import gpus

CONFIG_PATH = "/etc/containerd/config.toml"
BACKUP_PATH = "/etc/containerd/config.toml.before-geotrain"
SOCKET = "/run/containerd/containerd.sock"
K3S_CNI_BIN = "/var/lib/rancher/k3s/data/current/bin"
K3S_CNI_CONF = "/var/lib/rancher/k3s/agent/etc/cni/net.d"
NVIDIA_RUNTIME = "/usr/bin/nvidia-container-runtime"
NVIDIA_REPO = ("curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey"
               " | gpg --dearmor --yes -o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
               " && curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/"
               "nvidia-container-toolkit.list | sed 's#deb https://#deb [signed-by=/usr/share/"
               "keyrings/nvidia-container-toolkit-keyring.gpg] https://#g'"
               " > /etc/apt/sources.list.d/nvidia-container-toolkit.list")
COMMANDS = {"containerd": "containerd", "ctr": "containerd", "runc": "runc"}
PREFIX = "/usr/local"
DOWNLOADS = "/var/lib/geotrain/downloads"
UNIT_PATH = "/etc/systemd/system/containerd.service"  # before the distribution's /lib unit
# containerd's own unit (containerd/containerd containerd.service), for the release binary.
UNIT = """[Unit]
Description=containerd container runtime (geotrain, release {version})
Documentation=https://containerd.io
After=network.target local-fs.target dbus.service

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart={prefix}/bin/containerd --config {config}
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
"""
ANSWERS = f"test -S {SOCKET} && ctr --address {SOCKET} --timeout 2s version >/dev/null 2>&1"
# A device a plugin hands a pod (AMD's /dev/kfd, /dev/dri/renderD*) keeps the host's owner and
# group unless this is set; then it is owned by the container's runAsUser/runAsGroup, which the
# non-root trainer can open whatever gid the host's render group has. Upstream: containerd
# pkg/cri/opts/spec_linux_opts.go WithDevices (enableDeviceOwnershipFromSecurityContext), the CRI
# plugin's option in docs/cri/config.md, and kubernetes.io/blog/2021/11/09/non-root-containers-and-devices/.
DEVICE_OWNERSHIP = ("  # devices owned by the pod's runAsUser/runAsGroup (non-root GPU pods)",
                    "  device_ownership_from_security_context = true")


# The CRI plugin's tables by config version: version 2 (containerd 1.x, still read by 2.x) has
# one plugin "io.containerd.grpc.v1.cri"; version 3 (containerd 2.x) splits it into
# "io.containerd.cri.v1.images" (pinned sandbox image, registry) and "io.containerd.cri.v1.runtime"
# (runtimes, devices, CNI, whose bin_dir became the list bin_dirs in 2.1). containerd
# docs/cri/config.md (read at commit 301026e58, 2026-08-22) for both layouts.
CRI_TABLES = {2: ('plugins."io.containerd.grpc.v1.cri"', 'plugins."io.containerd.grpc.v1.cri"'),
              3: ('plugins."io.containerd.cri.v1.images"', 'plugins."io.containerd.cri.v1.runtime"')}
SANDBOX_IMAGE = "rancher/mirrored-pause:3.6"


def config_version(containerd_version: str | None) -> int:
    """The config format the containerd that will run reads best: 3 from 2.0 on, else 2."""
    have = versions.parse_version(containerd_version or versions.CONTAINERD_VERSION)
    return 3 if have and have[0] >= 2 else 2


def render_config(systemd_cgroup: bool, nvidia: bool, version: int | None = None,
                  mirrors: bool = False) -> str:
    """The containerd config geotrain writes, in the format of `version` (default: the pinned
    release's); `mirrors`: registries' hosts.toml under CERTS_DIR (registry_mirrors)."""
    version = version or config_version(None)
    images, cri = CRI_TABLES[version]
    runtimes = f"{cri}.containerd.runtimes"
    cgroup = "true" if systemd_cgroup else "false"
    lines = ["# Written by geotrain: containerd for k3s (--container-runtime-endpoint).",
             f"version = {version}", ""]
    if version == 2:
        lines += [f"[{cri}]", f'  sandbox_image = "{SANDBOX_IMAGE}"', *DEVICE_OWNERSHIP]
    else:
        lines += [f"[{images}.pinned_images]", f'  sandbox = "{SANDBOX_IMAGE}"', f"[{cri}]", *DEVICE_OWNERSHIP]
    if mirrors:
        lines += [f"[{images}.registry]", f'  config_path = "{CERTS_DIR}"']
    lines += [
        f"[{cri}.containerd]",
        f'  default_runtime_name = "{"nvidia" if nvidia else "runc"}"',
        f"[{runtimes}.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{runtimes}.runc.options]",
        f"  SystemdCgroup = {cgroup}",
    ]
    if nvidia:
        lines += [
            f"[{runtimes}.nvidia]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{runtimes}.nvidia.options]",
            f'  BinaryName = "{NVIDIA_RUNTIME}"',
            f"  SystemdCgroup = {cgroup}",
        ]
    lines += [f"[{cri}.cni]",
              f'  bin_dir = "{K3S_CNI_BIN}"' if version == 2 else f'  bin_dirs = ["{K3S_CNI_BIN}"]',
              f'  conf_dir = "{K3S_CNI_CONF}"', ""]
    return "\n".join(lines)


UNIT = UNIT.format(version=versions.CONTAINERD_VERSION, prefix=PREFIX, config=CONFIG_PATH)


def installed_version(facts: dict) -> str | None:
    """containerd's version from the node's facts; None when it is not installed."""
    found = facts.get("containerd") or {}
    return found.get("version") if found.get("installed") else None


def verdict(facts: dict, k3s_version: str) -> str:
    """'ok', or 'install' (missing or below the floor for this Kubernetes minor)."""
    have = installed_version(facts)
    return "ok" if have and versions.containerd_supported(have, k3s_version) else "install"


def release_command(arch: str, tarball: str | None, want: str | None = None) -> str:
    """Unpack the pinned release into /usr/local; a download is checked against its known
    sha256 (`want`; None only with --insecure-skip-checksum: the release's own list)."""
    work = download_path(arch)
    if tarball:
        fetch = f"test -f {shlex.quote(work)}"
    else:
        url, sums = versions.containerd_urls(arch)
        own_list = (f"curl -sfL --retry 3 {shlex.quote(sums)} | sed {shlex.quote('s# .*# ' + work + '#')}"
                    " | sha256sum -c -")
        fetch = (f"mkdir -p -m 700 {DOWNLOADS} && curl -sfL --retry 3 -o {shlex.quote(work)} {shlex.quote(url)}"
                 f" && {checksums.verify_download(want, shlex.quote(work), own_list)}")
    return f"{fetch} && tar -C {PREFIX} -xzf {shlex.quote(work)} bin/ && rm -f {shlex.quote(work)}"


def download_path(arch: str) -> str:
    """Where the tarball lands: a root-only dir, never a name another user could pre-create."""
    return f"{DOWNLOADS}/{versions.containerd_tarball(arch)}"


def bundle_tarball(bundle: str | None, arch: str) -> Path | None:
    if not bundle:
        return None
    path = Path(bundle) / versions.containerd_tarball(arch)
    return path if path.is_file() else None


def _install_release(ctx: DeployContext, target: NodeTarget, arch: str) -> str:
    local, options = bundle_tarball(ctx.plan.k3s.bundle, arch), ctx.plan.k3s
    name, dry_run = versions.containerd_tarball(arch), target.session.dry_run
    want = checksums.expected(options, name)
    if not (local or want or options.insecure_skip_checksum or dry_run):
        raise StepFailed(checksums.missing_message(options, name))
    if local:
        data = local.read_bytes()
        if not dry_run:  # checked before it reaches the node
            checksums.check_bytes(options, name, data, f"air-gap bundle file {local}")
        target.session.change(f"mkdir -p -m 700 {DOWNLOADS}", what="creating the download dir")
        target.session.put(download_path(arch), data, mode=0o600)
    what = f"installing containerd {versions.CONTAINERD_VERSION} ({arch})"
    if local:
        target.session.change(release_command(arch, str(local)), timeout=900, what=what)
    else:  # a failed download names what its exit code means and offers the bundle
        failures.download(target.session, release_command(arch, None, want), what, arch)
    if target.facts.get("init", {}).get("systemd") and target.session.ensure_file(UNIT_PATH, UNIT, mode=0o644):
        target.session.change("systemctl daemon-reload", what="reloading systemd")
    target.state["containerd_release"] = versions.CONTAINERD_VERSION
    target.facts["containerd_binary_changed"] = True  # restart on the new binary
    return f"containerd {versions.CONTAINERD_VERSION} ({arch})"


def _install(ctx: DeployContext, target: NodeTarget) -> str:
    facts = target.gather_facts()
    installed = []
    if verdict(facts, ctx.plan.k3s.version) == "install" or ctx.dry_run:
        try:
            arch = versions.release_arch(facts.get("system", {}).get("arch"))
        except versions.UnsupportedArch as exc:
            raise StepFailed(f"{target.name}: {exc}: install containerd "
                             f"{versions.containerd_floor_text(ctx.plan.k3s.version)} yourself")
        if "k3s" in ctx.shared.get("steps", ["k3s"]) or not installed_version(facts):
            installed.append(_install_release(ctx, target, arch))
    installed += packages.ensure_commands(target, {"runc": "runc"}, "containerd:missing")
    nvidia = "nvidia" in gpus.vendors(facts)
    if nvidia and not target.fact("nvidia-ctk", "command -v nvidia-ctk").ok:
        if not facts["system"]["apt"]:
            raise StepFailed(f"{target.name} has NVIDIA GPUs but no nvidia-container-toolkit, and "
                             "it is not Debian/Ubuntu: install the toolkit yourself and re-run")
        target.session.change(NVIDIA_REPO, what="adding the NVIDIA container toolkit repository")
        packages.apt_install(target, ["nvidia-container-toolkit"])
        installed.append("nvidia-container-toolkit")
    return f"installed {', '.join(installed)}" if installed else "containerd already installed"


def _configure(ctx: DeployContext, target: NodeTarget) -> str:
    facts = target.gather_facts()
    running = target.state.get("containerd_release") or installed_version(facts)  # what will read it
    mirrors = ctx.plan.registry_mirrors
    text = render_config(facts["init"]["systemd"], "nvidia" in gpus.vendors(facts), config_version(running),
                         mirrors=bool(mirrors))
    for registry, url in sorted(mirrors.items()):  # read at each pull: no restart for these
        target.session.ensure_file(hosts_path(registry), hosts_toml(registry, url), mode=0o644)
    current = target.fact(f"file:{CONFIG_PATH}", file_state(CONFIG_PATH))
    have = current.stdout.split()[:1]
    want = hashlib.sha256(text.encode()).hexdigest()
    if have not in ([], ["nodir"], [want]) and not target.session.dry_run:
        # keep the owner's own config once, so `clusters delete` can put it back
        target.session.change(f"grep -q '^# Written by geotrain' {CONFIG_PATH} ||"
                              f" cp -n {CONFIG_PATH} {BACKUP_PATH}", what="backing up the config")
    changed = target.session.ensure_file(CONFIG_PATH, text, mode=0o644, current=current)
    target.facts["containerd_config_changed"] = changed
    links = nvidia_devices.keep_devices_across_reload(target) if "nvidia" in gpus.vendors(facts) else None
    return ("config written" if changed else "config up to date") + (f", {links}" if links else "")


def _run(ctx: DeployContext, target: NodeTarget) -> str:
    restart = (target.facts.get("containerd_config_changed", False)
               or target.facts.get("containerd_binary_changed", False))
    ready = services.Ready(ANSWERS, f"containerd to answer on {SOCKET}", timeout=60)
    changed = services.ensure_running(target, "containerd",
                                      ["containerd", "--config", CONFIG_PATH], "containerd",
                                      restart=restart, ready=ready)
    if not changed and not target.fact("containerd:answer", ANSWERS).ok:
        services.wait_until(target, ANSWERS, ready.what, timeout=ready.timeout)
    return "containerd (re)started and answering" if changed else "containerd running"


def _probe(ctx: DeployContext, target: NodeTarget) -> dict[str, str]:
    return {"containerd:missing": packages.missing_probe(["runc"]),
            "nvidia-ctk": "command -v nvidia-ctk", f"file:{CONFIG_PATH}": file_state(CONFIG_PATH),
            **services.probe("containerd", "containerd"), "containerd:answer": ANSWERS}


STEP = Step("containerd", [Phase("install", _install), Phase("configure", _configure),
                           Phase("run", _run)], probe=_probe)
