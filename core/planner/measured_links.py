"""The planner's link rates from what `clusters check` measured (issue 43), where it did.

The network matrix's probe is one TCP transfer per ordered pair at deploy time: an estimate of what
a collective will get. `clusters check` times the collective itself: a 2-rank all-reduce per pair of
nodes over the mesh, reported as bus bandwidth (nccl-tests' convention). With two ranks busbw equals
algbw, and each rank sends and receives the whole payload once (gloo's ring: half in the
reduce-scatter, half in the all-gather), so busbw is the rate the link carried each way: the
planner's Link.mbit_s = busbw x 8 / 1e6. The probe's latency stays (the check times no ping).
A pair the check did not measure (a node without torch, a failed link) keeps its probe figure."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from core.planner.wan_what_if import Link


@dataclass(frozen=True)
class Figures:
    """Which rates a plan used: `source` is "measured" (some or all links from the check), "probe",
    "file" or "loopback"."""

    source: str
    measured_links: int = 0
    links: int = 0
    checked_at: float | None = None

    def describe(self) -> str:
        if self.source == "measured":
            when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.checked_at))
            rest = "" if self.measured_links == self.links else \
                f"; the other {self.links - self.measured_links} from the network probe"
            return (f"figures: all-reduce bus bandwidth measured by `clusters check` at {when} "
                    f"({self.measured_links} of {self.links} links{rest})")
        return {"probe": "figures: estimated from the network matrix's probe (one TCP transfer per pair); "
                         "run `geotrain clusters check NAME` to measure the all-reduce itself",
                "file": "figures: from the --matrix file",
                "loopback": "figures: loopback between local workers (assumed)"}[self.source]

    def as_dict(self) -> dict:
        return {"source": self.source, "measured_links": self.measured_links, "links": self.links,
                "checked_at": self.checked_at}


def measured_rates(check: dict | None) -> dict[tuple[str, str], float]:
    """Mbit/s per ordered node pair from a kept check (both directions), only links it measured."""
    rates: dict[tuple[str, str], float] = {}
    for link in (check or {}).get("links") or []:
        if not isinstance(link, dict) or link.get("kind") != "node" or link.get("ok") is not True:
            continue
        busbw = link.get("busbw")
        if isinstance(busbw, (int, float)) and not isinstance(busbw, bool) and 0 < busbw < 1e13:
            rate = busbw * 8 / 1e6
            rates[(str(link.get("a")), str(link.get("b")))] = rates[(str(link.get("b")), str(link.get("a")))] = rate
    return rates


def with_measured(links: list[Link], check: dict | None) -> tuple[list[Link], Figures]:
    rates = measured_rates(check)
    out = [replace(link, mbit_s=rates[(link.src, link.dst)]) if (link.src, link.dst) in rates else link
           for link in links]
    used = sum((link.src, link.dst) in rates for link in links)
    if not used:
        return links, Figures("probe", 0, len(links))
    checked_at = check.get("checked_at") if isinstance(check.get("checked_at"), (int, float)) else None
    return out, Figures("measured", used, len(links), checked_at)
