"""Docker: an engine (dockerd, a docker service, its socket) blocks a node; a CLI alone does not.

geotrain installs its own containerd and k3s; a Docker engine on the same server fights
over containerd, iptables and cgroups.
"""

from __future__ import annotations

COMMAND = ("p=$(command -v dockerd) && echo \"dockerd $p\"; p=$(command -v docker) && echo \"cli $p\"; "
           "for f in /lib/systemd/system/docker.service /usr/lib/systemd/system/docker.service "
           "/etc/systemd/system/docker.service /etc/init.d/docker; do [ -e \"$f\" ] && echo \"service $f\"; done; "
           "[ -e /var/run/docker.pid ] && echo 'running dockerd'; "
           "[ -S /var/run/docker.sock ] && echo 'socket /var/run/docker.sock'; true")
_ENGINE_EVIDENCE = ("dockerd", "service", "running", "socket")


def parse(output: str) -> dict:
    evidence = [ln.strip() for ln in output.splitlines() if ln.strip()]
    engine = [e for e in evidence if e.split()[0] in _ENGINE_EVIDENCE]
    return {"engine": bool(engine), "cli": any(e.startswith("cli ") for e in evidence),
            "evidence": engine}
