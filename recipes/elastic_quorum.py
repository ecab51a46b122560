"""What the elastic quorum's keys say (standard library: the watcher reads them without torch).

recipes.elastic writes, under `gen<generation>/`: `outer/current` (the newest outer step taken)
and, per outer step s and attempt a, `q/<s>/<a>/members`: `rank:role:checkpoint[:datacenter];` per member.
"""

from __future__ import annotations

import re

QUORUM_KEY = re.compile(r"gen([^/]{1,64})/q/([0-9]{1,12})/([0-9]{1,3})/members")


def parse_members(raw: bytes) -> list[tuple[int, str, int, str]]:
    """(rank, role, checkpoint, datacenter) per member in rank order; a rank that registered twice
    counts once (its last entry). Entries are `rank:role:checkpoint[:datacenter];`."""
    members: dict[int, tuple[int, str, int, str]] = {}
    for item in raw.decode().split(";"):
        if item:
            parts = item.split(":")
            dc = parts[3] if len(parts) > 3 else ""
            members.pop(int(parts[0]), None)
            members[int(parts[0])] = (int(parts[0]), parts[1], int(parts[2]), dc)
    return sorted(members.values())


def _gen_order(gen: str) -> tuple:
    return (0, int(gen), "") if gen.isdigit() else (1, 0, gen)


def quorum_view(keys: dict[str, bytes]) -> dict:
    newest: dict[str, tuple[int, int, str]] = {}
    for key in keys:
        match = QUORUM_KEY.fullmatch(key)
        if match:
            gen, step, attempt = match.group(1), int(match.group(2)), int(match.group(3))
            if gen not in newest or (step, attempt) > newest[gen][:2]:
                newest[gen] = (step, attempt, key)
    gens = {k[3:].split("/", 1)[0] for k in keys if k.startswith("gen") and "/" in k}
    if not gens:
        return {"outer_step": None, "members": [], "datacenters": {}, "generation": ""}
    gen = max(gens, key=_gen_order)
    current = keys.get(f"gen{gen}/outer/current")
    members = parse_members(keys[newest[gen][2]]) if gen in newest else []
    dcs: dict[str, list[int]] = {}
    for rank, _role, _ckpt, dc in members:
        dcs.setdefault(dc or "default", []).append(rank)
    return {"outer_step": int(current) if current is not None else None,
            "members": [m[0] for m in members], "datacenters": dcs, "generation": gen}
