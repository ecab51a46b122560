"""Parallel TCP streams per peer (GEOTRAIN_WAN_STREAMS, recipes/streams.py) as a planner input.

One TCP connection moves at most one receive window per round trip. A link whose measured rate
(the network matrix's probe is one transfer, one connection) is at that ceiling is window-bound:
K streams carry up to K windows per round trip, so the planner multiplies its rate by K. A link
measured below the ceiling is bound by its line rate, where more streams only share it. This is
what the WAN bench found: 4 streams made DDP 2.5x faster per step at 100 ms with 256 KB buffers,
and gave no gain without the buffer cap (recipes/README.md, the WAN bench). The multiplied rate
is an upper bound (the line's own rate behind the window is not measured), said with the plan.

The window: Linux's default largest TCP receive buffer, net.ipv4.tcp_rmem's max 6291456 bytes
(kernel Documentation/networking/ip-sysctl.rst, tcp_rmem), unless --window-kb says otherwise.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace

from core.errors import InvalidInput
from core.planner.wan_what_if import Link

STREAMS_ENV = "GEOTRAIN_WAN_STREAMS"
DEFAULT_WINDOW_BYTES = 6291456
WINDOW_BOUND = 0.9  # measured at 90% of one stream's ceiling or more: window-bound
MAX_STREAMS = 64


def streams_from_env() -> int:
    """The workers' setting where this shell sets it (the local supervisor passes it on), else 1."""
    text = os.environ.get(STREAMS_ENV, "1").strip()
    if not text.isdigit() or not 1 <= int(text) <= MAX_STREAMS:
        raise InvalidInput(f"{STREAMS_ENV} is {text[:20]!r}, not a whole number from 1 to {MAX_STREAMS}",
                           f"unset it, or pass --streams N")
    return int(text)


def ceiling_mbit_s(latency_ms: float, window_bytes: int) -> float:
    """One stream's most: a window per round trip (latency_ms is the round trip)."""
    return math.inf if latency_ms <= 0 else window_bytes * 8 / (latency_ms / 1000) / 1e6


@dataclass(frozen=True)
class StreamsAssumed:
    streams: int
    window_bytes: int
    window_bound: int  # links whose rate was multiplied
    links: int

    def describe(self) -> str:
        if self.streams == 1:
            return f"assumes 1 TCP stream per peer ({STREAMS_ENV} unset or 1)"
        return (f"assumes {self.streams} TCP streams per peer ({STREAMS_ENV}={self.streams}): {self.window_bound} of "
                f"{self.links} links window-bound (one stream's ceiling {self.window_bytes // 1024} KiB per round trip), "
                f"their rate x{self.streams} at most; the others are bound by their line")


def with_streams(links: list[Link], streams: int, window_bytes: int = DEFAULT_WINDOW_BYTES
                 ) -> tuple[list[Link], StreamsAssumed]:
    if not 1 <= streams <= MAX_STREAMS:
        raise InvalidInput(f"--streams must be from 1 to {MAX_STREAMS}, not {streams}", "e.g. --streams 4")
    out, bound = [], 0
    for link in links:
        if streams > 1 and link.mbit_s >= WINDOW_BOUND * ceiling_mbit_s(link.latency_ms, window_bytes):
            bound += 1
            link = replace(link, mbit_s=link.mbit_s * streams)
        out.append(link)
    return out, StreamsAssumed(streams, window_bytes, bound, len(links))
