"""Keeping a daemon running: systemd where it is PID 1, a small supervisor otherwise.

Containers and test hosts often have no systemd; there a POSIX-sh supervisor restarts
the daemon when it exits and keeps its pid in /run/geotrain (gone at reboot, like the
daemon it supervises; re-running the deploy starts it again).
"""

from __future__ import annotations

import shlex

from core.bootstrap.plan import NodeTarget
from core.bootstrap.session import StepFailed, file_state

RUN_DIR = "/run/geotrain"
SUPERVISOR_PATH = f"{RUN_DIR}/supervise"
SUPERVISOR = """\
#!/bin/sh
# geotrain supervisor: runs "$@" and restarts it when it exits (no systemd here).
name=$1; shift
echo $$ > /run/geotrain/$name.pid
child=
trap '[ -n "$child" ] && kill $child 2>/dev/null; wait; rm -f /run/geotrain/$name.pid; exit 0' TERM INT
while true; do
  "$@" >> /run/geotrain/$name.log 2>&1 &
  child=$!
  wait $child
  sleep 2
done
"""


def _pid_check(name: str) -> str:
    return f"kill -0 $(cat {RUN_DIR}/{name}.pid 2>/dev/null) 2>/dev/null"


def state_probe(name: str, unit: str) -> str:
    """A fact: `enabled`/`active` lines under systemd, `running` for a supervised daemon."""
    return (f"if [ \"$(cat /proc/1/comm)\" = systemd ]; then systemctl is-enabled {unit};"
            f" systemctl is-active {unit}; else {_pid_check(name)} && echo running; fi")


def probe(name: str, unit: str) -> dict[str, str]:
    return {f"svc:{name}": state_probe(name, unit), f"file:{SUPERVISOR_PATH}":
            file_state(SUPERVISOR_PATH)}


def ensure_running(target: NodeTarget, name: str, command: list[str], unit: str,
                   restart: bool = False) -> bool:
    """Start `unit` (systemd) or supervise `command`; restart when asked. True if changed."""
    session = target.session
    state = target.fact(f"svc:{name}", state_probe(name, unit)).stdout.split()
    if target.facts.get("systemd"):
        enabled, active = (state + ["", ""])[:2]
        changed = False
        if enabled != "enabled":
            session.change(f"systemctl enable {unit}", what=f"enabling {unit}")
            changed = True
        if restart or active != "active":
            session.change(f"systemctl restart {unit}", what=f"starting {unit}")
            changed = True
        return changed
    target.ensure_file(SUPERVISOR_PATH, SUPERVISOR, mode=0o755)
    running = "running" in state
    if running and not restart:
        return False
    if running:
        stop_supervised(target, name)
    argv = " ".join(shlex.quote(part) for part in command)
    session.change(f"setsid -f /bin/sh {SUPERVISOR_PATH} {name} {argv} </dev/null >/dev/null 2>&1",
                   what=f"starting {name}")
    return True


def stop_supervised(target: NodeTarget, name: str) -> None:
    pidfile = f"{RUN_DIR}/{name}.pid"
    target.session.change(
        f"pid=$(cat {pidfile}); kill $pid; i=0; while kill -0 $pid 2>/dev/null && [ $i -lt 50 ];"
        f" do sleep 0.1; i=$((i+1)); done; rm -f {pidfile}", what=f"stopping {name}")


def wait_until(target: NodeTarget, probe: str, what: str, timeout: float,
               interval: float = 0.5) -> None:
    """Poll `probe` on the node until it succeeds; a bounded wait that names what failed."""
    seconds = max(1, int(timeout))
    script = f"until {probe}; do sleep {interval}; done"
    result = target.session.fact(
        f"timeout {seconds} sh -c {shlex.quote(script)}", timeout=seconds + 30)
    if not result.ok and not target.session.dry_run:
        raise StepFailed(f"gave up after {seconds}s waiting for {what} on {target.name}")
