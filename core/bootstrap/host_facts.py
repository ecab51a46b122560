"""The base facts every step needs (OS, init system, GPUs, addresses, listening ports).

One command gathers them all (a round trip per fact would dominate a re-run); `parse`
is pure and tested from recorded output.
"""

from __future__ import annotations

from core.bootstrap.plan import NodeTarget
from core.nodes.facts import containerd as containerd_fact

COMMAND = r"""
echo "kernel=$(uname -s)"
echo "arch=$(uname -m)"
echo "uid=$(id -u)"
( . /etc/os-release 2>/dev/null; echo "os_id=$ID"; echo "os_like=$ID_LIKE"; echo "os_version=$VERSION_ID" )
echo "pid1=$(cat /proc/1/comm 2>/dev/null)"
if pgrep -x dockerd >/dev/null 2>&1 || [ -S /var/run/docker.sock ]; then echo docker=running; fi
echo "disk_kb=$(df -Pk /var/lib 2>/dev/null | awk 'NR==2{print $4}')"
echo "nvidia=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')"
if [ -e /dev/kfd ]; then echo amd=1; fi
echo "addrs=$(ip -o -4 addr show 2>/dev/null | awk '{split($4,a,"/"); printf "%s ", a[1]}')"
if [ -d /sys/module/wireguard ] || modprobe -n -q wireguard 2>/dev/null; then echo wg_kernel=1; fi
ss -Hlntup 2>/dev/null | awk '{print "listen=" $1 " " $5 " " $7}'
""" + f"( {containerd_fact.COMMAND} ) | sed 's/^/containerd=/'\n"


DRY_RUN_FACTS = {"kernel": "Linux", "uid": 0, "apt": True, "systemd": True, "listen": [],
                 "addrs": [], "nvidia_gpus": False, "amd_gpus": False, "wg_kernel": False}


def parse(output: str) -> dict:
    facts: dict = {"listen": [], "docker": False, "amd_gpus": False, "wg_kernel": False}
    containerd_lines = []
    for line in output.splitlines():
        key, _, value = line.partition("=")
        value = value.strip()
        if key == "listen":
            proto, local, *owner = value.split(" ", 2)
            port = local.rsplit(":", 1)[-1]
            process = owner[0].split('"')[1] if owner and '"' in owner[0] else ""
            if port.isdigit():
                facts["listen"].append((proto, int(port), process))
        elif key in ("uid", "disk_kb", "nvidia"):
            facts[key] = int(value) if value.isdigit() else None
        elif key == "addrs":
            facts["addrs"] = value.split()
        elif key == "containerd":
            containerd_lines.append(value)
        elif key == "docker":
            facts["docker"] = True
        elif key == "amd":
            facts["amd_gpus"] = True
        elif key == "wg_kernel":
            facts["wg_kernel"] = True
        elif key:
            facts[key] = value
    found = containerd_fact.parse("\n".join(containerd_lines))
    facts["containerd_version"] = found["version"] if found["installed"] else None
    facts["systemd"] = facts.get("pid1") == "systemd"
    facts["nvidia_gpus"] = bool(facts.get("nvidia"))
    like = f"{facts.get('os_id', '')} {facts.get('os_like', '')}"
    facts["apt"] = "debian" in like or "ubuntu" in like
    return facts


def probe(ctx, target: NodeTarget) -> dict[str, str]:
    return {"host": COMMAND.strip()}


def gather(target: NodeTarget, refresh: bool = False) -> dict:
    """The node's base facts, gathered once per deploy unless `refresh`."""
    if target.session.dry_run:  # nothing is asked: assume a Debian-like node, keep seeds
        for key, value in DRY_RUN_FACTS.items():
            target.facts.setdefault(key, value)
        return target.facts
    if refresh or "kernel" not in target.facts:
        result = target.fact("host", COMMAND.strip(), sudo=False)
        target.facts.update(parse(result.stdout))
    return target.facts
