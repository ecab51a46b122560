"""Which datacenters to train in (Atlas's datacenter selection), by the planner's arithmetic.

With hierarchical DiLoCo a datacenter trains as one replica (its GPUs all-reduce over the
LAN) and only the outer exchange crosses the WAN: per outer step, each datacenter moves
about 2(K-1)/K of one (compressed) payload, at the pace of the slowest uplink among the K
chosen. Sharding that payload over a datacenter's workers spreads it over their connections,
which fills the uplink but does not widen it, so a measured link's rate is taken as the
uplink. Compute scales with the GPUs chosen: the same data takes G_all/G times the steps on
G GPUs. A datacenter behind a slow link can cost more in waiting than its GPUs give back;
every subset (K <= 8) is priced and the fastest to the same amount of training wins.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from core.errors import InvalidInput
from core.planner import wan_what_if as planner

EXHAUSTIVE_MAX = 8  # 255 subsets; beyond, datacenters are dropped one at a time, worst link first
TIE = 0.005  # choices within 0.5% of the fastest count as equal: the one with more GPUs wins


@dataclass(frozen=True)
class Site:
    """A datacenter: its name and the GPUs (workers, for CPU nodes) it brings."""

    name: str
    gpus: int


@dataclass(frozen=True)
class SiteLink:
    """The WAN between two datacenters: slowest measured rate, longest round trip."""

    mbit_s: float
    latency_ms: float


@dataclass(frozen=True)
class Choice:
    """One set of datacenters, priced: its best preset and the time to the training target."""

    datacenters: tuple[str, ...]
    gpus: int
    preset: str
    overlap: bool
    step_s: float  # seconds per training step, the exchange's wait included
    seconds: float  # to train as far as `steps` steps on every datacenter's GPUs
    mbit_s: float  # slowest uplink among them (inf for one datacenter)
    latency_ms: float


def duration(seconds: float) -> str:
    """Seconds as people read them: 40 s, 12 min, 1.8 h, 3.2 d."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


@dataclass
class DatacenterPlan:
    """Every priced set of datacenters, the choice and the sentence that says why."""

    steps: int
    sites: list[Site]
    links: dict[tuple[str, str], SiteLink]
    choices: list[Choice] = field(default_factory=list)  # fastest first
    best: Choice | None = None
    everyone: Choice | None = None  # all datacenters

    def link(self, a: str, b: str) -> SiteLink:
        return self.links[tuple(sorted((a, b)))]  # type: ignore[index]

    def reason(self) -> str:
        """One line: which datacenters, which preset, and why."""
        best, every = self.best, self.everyone
        assert best is not None and every is not None
        how = f"preset {best.preset}{' with overlap' if best.overlap else ''}"
        if best.datacenters == every.datacenters:
            others = [c for c in self.choices if c.datacenters != best.datacenters]
            tail = f" (best without all: {duration(others[0].seconds)})" if others else ""
            return f"use all {len(self.sites)} datacenters ({best.gpus} GPUs), {how}: " \
                   f"{duration(best.seconds)}{tail}"
        dropped = [s.name for s in self.sites if s.name not in best.datacenters]
        # a dropped datacenter's slowest link to the chosen ones; "behind" it only when slower
        # than what the chosen ones already wait for (else its GPUs just do not pay their way)
        rates = sorted({min(self.link(d, c).mbit_s for c in best.datacenters) for d in dropped})
        if rates[-1] >= best.mbit_s:
            why = "its GPUs do not pay for the exchange" if len(dropped) == 1 else \
                "their GPUs do not pay for the exchange"
        elif len(rates) == 1:
            why = f"behind a {rates[0]:g} Mbit/s link"
        else:
            why = f"behind {_names([f'{r:g}' for r in rates])} Mbit/s links"
        sooner, later = duration(best.seconds), duration(every.seconds)
        if sooner == later:  # more than TIE apart, yet the same when rounded: say by how much
            later += f" ({(every.seconds / best.seconds - 1) * 100:.1f}% longer)"
        return (f"use {_names(list(best.datacenters))} ({best.gpus} GPUs), {how}: dropping "
                f"{_names(dropped)} ({why}) finishes sooner: {sooner} vs {later} with all {len(self.sites)}")

    def as_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "sites": [asdict(s) for s in self.sites],
                "chosen": asdict(self.best) if self.best else None,
                "all": asdict(self.everyone) if self.everyone else None, "reason": self.reason(),
                "choices": [asdict(c) for c in self.choices]}


def site_links(links: list[planner.Link], site_of: dict[str, str]) -> dict[tuple[str, str], SiteLink]:
    """Node-to-node measurements -> datacenter pairs (slowest rate, longest round trip);
    links inside one datacenter are LAN and left out."""
    pairs: dict[tuple[str, str], SiteLink] = {}
    for link in links:
        a, b = site_of.get(link.src, link.src), site_of.get(link.dst, link.dst)
        if a == b:
            continue
        if link.mbit_s is None or link.mbit_s <= 0:
            raise InvalidInput(f"link {link.src} -> {link.dst} has no usable bandwidth ({link.mbit_s!r} Mbit/s)",
                               "re-measure the network matrix or fix the matrix file")
        key = tuple(sorted((a, b)))
        have = pairs.get(key)  # type: ignore[arg-type]
        pairs[key] = SiteLink(min(link.mbit_s, have.mbit_s if have else math.inf),  # type: ignore[index]
                              max(link.latency_ms or 0.0, have.latency_ms if have else 0.0))
    return pairs


def _subsets(sites: list[Site], links: dict[tuple[str, str], SiteLink]) -> list[tuple[Site, ...]]:
    if len(sites) <= EXHAUSTIVE_MAX:
        return [c for k in range(1, len(sites) + 1) for c in itertools.combinations(sites, k)]
    chosen, out = list(sites), []
    while chosen:  # too many to price every set: drop the one behind the slowest link, repeatedly
        out.append(tuple(chosen))
        worst = min(chosen, key=lambda s: (min((links[tuple(sorted((s.name, o.name)))].mbit_s  # type: ignore[index]
                                                for o in chosen if o is not s), default=math.inf), s.gpus))
        chosen.remove(worst)
    return out


def _price(subset: tuple[Site, ...], links: dict[tuple[str, str], SiteLink], all_gpus: int, steps: int,
           presets: dict[str, dict[str, Any]], params: int, compute_s: float, target: float,
           efficiency: float, overlap: bool | None) -> Choice:
    pairs = [links[tuple(sorted((a.name, b.name)))] for a, b in itertools.combinations(subset, 2)]  # type: ignore[index]
    net = planner.Network(workers=len(subset), mbit_s=min((p.mbit_s for p in pairs), default=math.inf),
                          latency_ms=max((p.latency_ms for p in pairs), default=0.0))
    result = planner.plan(presets, params, compute_s, net, target, efficiency, between_datacenters=True)
    best = next(e for e in result.estimates if e.preset == result.recommended)
    overlap = result.overlap if overlap is None else overlap and best.inner_steps > 1
    step = best.step_s_overlap if overlap else best.step_s
    gpus = sum(s.gpus for s in subset)
    return Choice(tuple(s.name for s in subset), gpus, best.preset, overlap, step,
                  steps * all_gpus / gpus * step, net.mbit_s, net.latency_ms)


def choose(sites: list[Site], links: dict[tuple[str, str], SiteLink], presets: dict[str, dict[str, Any]],
           params: int, compute_s: float, steps: int, target: float = planner.DEFAULT_TARGET,
           efficiency: float = planner.DEFAULT_EFFICIENCY, overlap: bool | None = None) -> DatacenterPlan:
    """Price every set of datacenters and pick the fastest to train as far as `steps` steps on
    all of them would; within TIE of the fastest, the set with more GPUs. `overlap` None: as
    the planner recommends per set; True/False: every set priced so (a run that fixed it)."""
    if not sites:
        raise InvalidInput("no datacenters to choose from", "give the nodes a datacenter, or a --matrix "
                           "file with a `datacenters:` section")
    if steps < 1:
        raise InvalidInput(f"steps must be at least 1, not {steps}", "pass --steps N")
    for a, b in itertools.combinations(sorted(s.name for s in sites), 2):
        if (a, b) not in links:
            raise InvalidInput(f"no measured link between datacenters {a} and {b}",
                               "re-run the network step of the cluster wizard, or give the link in the --matrix file")
    all_gpus = sum(s.gpus for s in sites)
    result = DatacenterPlan(steps=steps, sites=sorted(sites, key=lambda s: s.name), links=links)
    result.choices = sorted((_price(subset, links, all_gpus, steps, presets, params, compute_s, target, efficiency,
                                    overlap)
                             for subset in _subsets(result.sites, links)),
                            key=lambda c: (c.seconds, -c.gpus, c.datacenters))
    fastest = result.choices[0].seconds
    near = [c for c in result.choices if c.seconds <= fastest * (1 + TIE)]
    result.best = max(near, key=lambda c: (c.gpus, len(c.datacenters)))  # first of equals: the faster
    result.everyone = next(c for c in result.choices if len(c.datacenters) == len(sites))
    return result
