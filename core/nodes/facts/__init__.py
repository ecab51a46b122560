"""What a server is: each fact family is a shell command plus a pure `parse(output)`.

All families run as one POSIX shell script in a single SSH round-trip, each output
behind a marker line; `parse_all` splits the output and hands each part to its parser.
The public-address probe (network, slowest) runs in the background meanwhile.
The node pool (import, refresh) and the cluster wizard (once per node per deploy) run
the same script; core.nodes.blockers judges what it found.
"""

from __future__ import annotations

import time
from typing import Callable

from core.nodes.facts import (addresses, cgroup, containerd, cpu, device_groups, disk, docker, gpus,
                              init, k3s, listening, memory, public_ip, sudo, system, wireguard)

MARKER = "@@geotrain-fact:"

# name -> (command, parser); the parsed value is stored under the same name
FAMILIES: dict[str, tuple[str, Callable[[str], object]]] = {
    "system": (system.COMMAND, system.parse),
    "init": (init.COMMAND, init.parse),
    "cgroup": (cgroup.COMMAND, cgroup.parse),
    "cpu": (cpu.COMMAND, cpu.parse),
    "memory": (memory.COMMAND, memory.parse),
    "disk": (disk.COMMAND, disk.parse),
    "nvidia": (gpus.NVIDIA_COMMAND, gpus.parse_nvidia),
    "rocm": (gpus.ROCM_COMMAND, gpus.parse_rocm),
    "device_groups": (device_groups.COMMAND, device_groups.parse),
    "docker": (docker.COMMAND, docker.parse),
    "containerd": (containerd.COMMAND, containerd.parse),
    "wireguard": (wireguard.COMMAND, wireguard.parse),
    "k3s": (k3s.COMMAND, k3s.parse),
    "sudo": (sudo.COMMAND, sudo.parse),
    "addresses": (addresses.COMMAND, addresses.parse),
    "listening": (listening.COMMAND, listening.parse),
}


def script(public_ip_urls: tuple[str, ...] = public_ip.DEFAULT_URLS) -> str:
    """The one script that gathers every fact; run with `sh -s`, fed on stdin."""
    lines = []
    if public_ip_urls:
        lines += ['gt_pub=$(mktemp 2>/dev/null || echo "/tmp/.geotrain-pub-$$")',
                  f'( {public_ip.command(public_ip_urls)} ) >"$gt_pub" 2>/dev/null &']
    for name, (command, _) in FAMILIES.items():
        lines.append(f"echo '{MARKER}{name}'; {{ {command} ; }} 2>/dev/null")
    lines.append(f"echo '{MARKER}public_ip'")
    if public_ip_urls:
        lines += ["wait", 'cat "$gt_pub" 2>/dev/null; rm -f "$gt_pub"']
    return "\n".join(lines) + "\n"


def split_sections(output: str) -> dict[str, str]:
    """The script's output -> {family: its command's output}."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in output.splitlines():
        if line.startswith(MARKER):
            current = line[len(MARKER):].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return {name: "\n".join(body) for name, body in sections.items()}


def parse_all(output: str) -> dict:
    """The whole script's output -> the facts dict stored on the node."""
    sections = split_sections(output)
    facts: dict = {name: parse(sections.get(name, "")) for name, (_, parse) in FAMILIES.items()}
    nvidia, rocm = facts.pop("nvidia"), facts.pop("rocm")
    facts["gpus"] = nvidia["gpus"] + rocm["gpus"]
    facts["gpu_errors"] = [e for e in (nvidia["error"], rocm["error"]) if e]
    facts["amd_kfd"] = rocm["kfd"]
    facts["public_ip"] = public_ip.parse(sections.get("public_ip", ""))
    facts["gathered_at"] = time.time()
    return facts
