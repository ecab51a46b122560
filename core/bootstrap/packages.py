"""Installing missing programs with apt (Debian/Ubuntu); a clear error elsewhere.

What geotrain installed is remembered per node, so `clusters delete` removes only that
(and `--keep-packages` leaves it).
"""

from __future__ import annotations

import shlex

from core.bootstrap.plan import NodeTarget
from core.bootstrap.session import StepFailed

APT = "DEBIAN_FRONTEND=noninteractive apt-get"


def missing_probe(commands) -> str:
    """A fact: the names of the commands that are not on PATH."""
    return "; ".join(f"command -v {shlex.quote(c)} >/dev/null || echo {shlex.quote(c)}"
                     for c in commands)


def missing_commands(target: NodeTarget, commands: list[str], key: str) -> list[str]:
    return target.fact(key, missing_probe(commands)).stdout.split() if commands else []


def apt_install(target: NodeTarget, names: list[str]) -> None:
    quoted = " ".join(map(shlex.quote, names))
    target.session.change(f"{APT} update -q && {APT} install -y -q {quoted}",
                          timeout=900, what=f"apt-get install {' '.join(names)}")


def ensure_commands(target: NodeTarget, wanted: dict[str, str], key: str) -> list[str]:
    """Install the packages providing the missing commands of {command: package}.

    `key` names the probed fact `missing_probe(wanted)` when it was gathered already.
    """
    missing = [c for c in missing_commands(target, list(wanted), key) if c in wanted]
    if target.session.dry_run:
        missing = list(wanted)
    names = sorted({wanted[c] for c in missing})
    if not names:
        return []
    system = target.gather_facts()["system"]
    if not system["apt"] and not target.session.dry_run:
        raise StepFailed(f"{', '.join(names)} missing and {target.name} runs "
                         f"{system['os_id'] or 'an unknown OS'} (not Debian/Ubuntu): "
                         f"install {', '.join(names)} yourself and re-run")
    apt_install(target, names)
    mine = target.state.setdefault("installed_packages", [])
    mine.extend(n for n in names if n not in mine)
    return names
