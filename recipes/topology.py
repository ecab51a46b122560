"""Which datacenter a worker is in, and its rank there: the two-level layout of hierarchical DiLoCo.

Kubernetes (and any launcher that knows where its pods landed) says it in the environment:

    GEOTRAIN_DATACENTER   the datacenter's name (for logs)
    GEOTRAIN_DC_INDEX     0 .. GEOTRAIN_DC_COUNT-1
    GEOTRAIN_DC_COUNT     datacenters in the run
    GEOTRAIN_DC_RANK      0 .. GEOTRAIN_DC_SIZE-1, the worker's rank inside its datacenter
    GEOTRAIN_DC_SIZE      workers in that datacenter (the same in every datacenter)

Without them, the config's `datacenters: K` splits the ranks evenly and in order
(`local` and the WAN bench): ranks 0..M-1 are datacenter 0, and so on. Every rank
then learns every other rank's place with one small all-gather, so the process
groups (one per datacenter for the LAN, one per datacenter rank for the WAN) are
created identically everywhere, whatever order the launcher gave the ranks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV = ("GEOTRAIN_DATACENTER", "GEOTRAIN_DC_INDEX", "GEOTRAIN_DC_COUNT", "GEOTRAIN_DC_RANK", "GEOTRAIN_DC_SIZE")


class TopologyError(ValueError):
    """The layout cannot be: a one-line reason that says what to change."""


@dataclass(frozen=True)
class Topology:
    """This worker's place: datacenter `index` of `count`, rank `rank` of `size` inside it."""

    name: str
    index: int
    count: int
    rank: int
    size: int

    @property
    def hierarchical(self) -> bool:
        return self.count > 1 and self.size > 0

    def describe(self) -> str:
        return f"datacenter {self.name} ({self.index + 1} of {self.count}), rank {self.rank} of {self.size} there"


def _int_env(env: dict, key: str) -> int:
    raw = env[key]
    if not raw.isdigit():
        raise TopologyError(f"{key}={raw[:20]!r} is not a whole number: the launcher must set it to one")
    return int(raw)


def resolve(rank: int, world_size: int, datacenters: int, env: dict | None = None) -> Topology:
    """From the environment when the launcher set it, else `datacenters` even splits of the ranks."""
    env = os.environ if env is None else env
    if env.get("GEOTRAIN_DC_COUNT"):
        missing = [k for k in ENV[1:] if not env.get(k)]
        if missing:
            raise TopologyError(f"GEOTRAIN_DC_COUNT is set but {', '.join(missing)} is not: set all of {', '.join(ENV[1:])}")
        index, count, dc_rank, size = (_int_env(env, k) for k in ENV[1:])
        if count * size != world_size:
            raise TopologyError(f"{count} datacenters x {size} workers != {world_size} workers: "
                                "every datacenter needs the same number of workers")
        if not (index < count and dc_rank < size):
            raise TopologyError(f"datacenter {index} rank {dc_rank} is outside {count} x {size}")
        return Topology(env.get("GEOTRAIN_DATACENTER") or f"dc{index}", index, count, dc_rank, size)
    if datacenters < 1 or world_size % datacenters:
        raise TopologyError(f"{world_size} workers do not split evenly into {datacenters} datacenters: "
                            "use a number of workers that is a multiple of datacenters")
    size = world_size // datacenters
    return Topology(f"dc{rank // size}", rank // size, datacenters, rank % size, size)


def layout(places: list[tuple[int, int]], count: int, size: int) -> tuple[list[list[int]], list[list[int]]]:
    """Global ranks of each datacenter (LAN groups, ordered by rank inside it) and of each
    datacenter rank across datacenters (WAN groups, ordered by datacenter), from every
    rank's (index, rank inside)."""
    lan = [[0] * size for _ in range(count)]
    wan = [[0] * count for _ in range(size)]
    seen = set()
    for global_rank, (index, dc_rank) in enumerate(places):
        if not (0 <= index < count and 0 <= dc_rank < size):
            raise TopologyError(f"worker {global_rank} claims datacenter {index} rank {dc_rank}: outside "
                                f"{count} datacenters of {size} workers each")
        if (index, dc_rank) in seen:
            raise TopologyError(f"two workers claim datacenter {index} rank {dc_rank}")
        seen.add((index, dc_rank))
        lan[index][dc_rank] = global_rank
        wan[dc_rank][index] = global_rank
    return lan, wan
