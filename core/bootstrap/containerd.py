"""containerd: installed from the distribution, configured for k3s, kept running.

SystemdCgroup follows the init system (the systemd cgroup driver needs systemd as
PID 1); the CNI paths point at the plugins k3s unpacks, so k3s can use this containerd
through --container-runtime-endpoint. NVIDIA nodes get the nvidia runtime as default.
"""

from __future__ import annotations

import hashlib

from core.bootstrap import packages, services
from core.bootstrap.plan import DeployContext, NodeTarget
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
ANSWERS = f"test -S {SOCKET} && ctr --address {SOCKET} --timeout 2s version >/dev/null 2>&1"
RUNTIMES = 'plugins."io.containerd.grpc.v1.cri".containerd.runtimes'


def render_config(systemd_cgroup: bool, nvidia: bool) -> str:
    cgroup = "true" if systemd_cgroup else "false"
    lines = [
        "# Written by geotrain: containerd for k3s (--container-runtime-endpoint).",
        "version = 2",
        "",
        '[plugins."io.containerd.grpc.v1.cri"]',
        '  sandbox_image = "rancher/mirrored-pause:3.6"',
        '[plugins."io.containerd.grpc.v1.cri".containerd]',
        f'  default_runtime_name = "{"nvidia" if nvidia else "runc"}"',
        f"[{RUNTIMES}.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{RUNTIMES}.runc.options]",
        f"  SystemdCgroup = {cgroup}",
    ]
    if nvidia:
        lines += [
            f"[{RUNTIMES}.nvidia]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{RUNTIMES}.nvidia.options]",
            f'  BinaryName = "{NVIDIA_RUNTIME}"',
            f"  SystemdCgroup = {cgroup}",
        ]
    lines += [
        '[plugins."io.containerd.grpc.v1.cri".cni]',
        f'  bin_dir = "{K3S_CNI_BIN}"',
        f'  conf_dir = "{K3S_CNI_CONF}"',
        "",
    ]
    return "\n".join(lines)


def _install(ctx: DeployContext, target: NodeTarget) -> str:
    facts = target.gather_facts()
    installed = packages.ensure_commands(target, COMMANDS, "containerd:missing")
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
    text = render_config(facts["init"]["systemd"], "nvidia" in gpus.vendors(facts))
    current = target.fact(f"file:{CONFIG_PATH}", file_state(CONFIG_PATH))
    have = current.stdout.split()[:1]
    want = hashlib.sha256(text.encode()).hexdigest()
    if have not in ([], ["nodir"], [want]) and not target.session.dry_run:
        # keep the owner's own config once, so `clusters delete` can put it back
        target.session.change(f"grep -q '^# Written by geotrain' {CONFIG_PATH} ||"
                              f" cp -n {CONFIG_PATH} {BACKUP_PATH}", what="backing up the config")
    changed = target.session.ensure_file(CONFIG_PATH, text, mode=0o644, current=current)
    target.facts["containerd_config_changed"] = changed
    return "config written" if changed else "config up to date"


def _run(ctx: DeployContext, target: NodeTarget) -> str:
    restart = target.facts.get("containerd_config_changed", False)
    ready = services.Ready(ANSWERS, f"containerd to answer on {SOCKET}", timeout=60)
    changed = services.ensure_running(target, "containerd",
                                      ["containerd", "--config", CONFIG_PATH], "containerd",
                                      restart=restart, ready=ready)
    if not changed and not target.fact("containerd:answer", ANSWERS).ok:
        services.wait_until(target, ANSWERS, ready.what, timeout=ready.timeout)
    return "containerd (re)started and answering" if changed else "containerd running"


def _probe(ctx: DeployContext, target: NodeTarget) -> dict[str, str]:
    return {"containerd:missing": packages.missing_probe(COMMANDS),
            "nvidia-ctk": "command -v nvidia-ctk", f"file:{CONFIG_PATH}": file_state(CONFIG_PATH),
            **services.probe("containerd", "containerd"), "containerd:answer": ANSWERS}


STEP = Step("containerd", [Phase("install", _install), Phase("configure", _configure),
                           Phase("run", _run)], probe=_probe)
