"""Keeping a daemon running: systemd where it is PID 1, a small supervisor otherwise.

Containers and test hosts often have no systemd; there a POSIX-sh supervisor restarts
the daemon when it exits and keeps its pid in /run/geotrain (gone at reboot, like the
daemon it supervises; re-running the deploy starts it again).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from core.bootstrap.plan import NodeTarget
from core.bootstrap.session import StepFailed

RUN_DIR = "/run/geotrain"
# Run as `sh -c SUPERVISOR geotrain-supervise NAME CMD...`: no file to keep in sync.
SUPERVISOR = """\
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
    return {f"svc:{name}": state_probe(name, unit)}


@dataclass
class Ready:
    """How to tell a started daemon is up: a probe, what it shows, how long to wait."""

    probe: str
    what: str
    timeout: float = 60.0
    interval: float = 0.2


def _wait_script(probe: str, timeout: float, interval: float) -> str:
    seconds = max(1, int(timeout))
    return f"timeout {seconds} sh -c {shlex.quote(f'until {probe}; do sleep {interval}; done')}"


def _bounded(target: NodeTarget, ready: Ready) -> str:
    return f"gave up after {max(1, int(ready.timeout))}s waiting for {ready.what} on {target.name}"


def ensure_running(target: NodeTarget, name: str, command: list[str], unit: str,
                   restart: bool = False, ready: Ready | None = None) -> bool:
    """Start `unit` (systemd) or supervise `command`; restart when asked. True if changed.

    A start and the bounded wait for `ready` go in one round trip.
    """
    state = target.fact(f"svc:{name}", state_probe(name, unit)).stdout.split()
    todo: list[tuple[str, str]] = []
    if target.facts.get("init", {}).get("systemd"):
        enabled, active = (state + ["", ""])[:2]
        if enabled != "enabled":
            todo.append((f"systemctl enable {unit}", f"enabling {unit}"))
        if restart or active != "active":
            todo.append((f"systemctl restart {unit}", f"starting {unit}"))
    else:
        running = "running" in state
        if running and restart:
            todo.append((_stop_command(name), f"stopping {name}"))
        if restart or not running:
            argv = " ".join(shlex.quote(part) for part in command)
            todo.append((f"mkdir -p {RUN_DIR} && setsid -f /bin/sh -c {shlex.quote(SUPERVISOR)}"
                         f" geotrain-supervise {name} {argv} </dev/null >/dev/null 2>&1",
                         f"starting {name}"))
            target.session.dirs_made.add(RUN_DIR)
    if not todo:
        return False
    if ready:
        todo.append((_wait_script(ready.probe, ready.timeout, ready.interval), "waiting"))
    try:
        target.session.change_all(todo, timeout=(ready.timeout if ready else 0) + 120)
    except StepFailed as exc:
        if ready and getattr(exc, "index", None) == len(todo) - 1:
            raise StepFailed(_bounded(target, ready)) from None
        raise
    return True


def _stop_command(name: str) -> str:
    pidfile = f"{RUN_DIR}/{name}.pid"
    return (f"pid=$(cat {pidfile}); kill $pid; i=0; while kill -0 $pid 2>/dev/null &&"
            f" [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; rm -f {pidfile}")


def wait_until(target: NodeTarget, probe: str, what: str, timeout: float,
               interval: float = 0.5) -> None:
    """Poll `probe` on the node until it succeeds; a bounded wait that names what failed."""
    ready = Ready(probe, what, timeout, interval)
    result = target.session.fact(_wait_script(probe, timeout, interval), timeout=timeout + 30)
    if not result.ok and not target.session.dry_run:
        raise StepFailed(_bounded(target, ready))
