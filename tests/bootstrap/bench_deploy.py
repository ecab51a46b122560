"""Benchmark (prints, asserts nothing): deploy time for 1 vs 4 test hosts, and a no-op re-run.

    python -m tests.bootstrap.bench_deploy [--rounds N]

Needs root (netns test hosts with real sshd). Targets from issue 5: 4 hosts take at most
1.3x the time of 1 (the thread pool works); a no-op re-run takes at most 10% of the
first deploy (one fact round trip per node, no changes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from core.bootstrap.deploy import build_plan, deploy
from core.state.store import Store
from tests import testhosts
from tests.bootstrap.cluster_hosts import (MESH_SUBNET, PREFIX, ShellFactory, add_host_nodes,
                                           create)

ONLY = ["preflight", "containerd", "wireguard"]


def _timed(store, name, names, hosts, subnet=None):
    plan = build_plan(store, name, names, subnet=subnet)
    started = time.monotonic()
    ends: dict[str, float] = {}

    def on_event(event):
        if event.state == "done":
            ends[event.step] = time.monotonic() - started

    result = deploy(plan, only=ONLY, shell_factory=ShellFactory(hosts), store=store,
                    on_event=on_event)
    seconds = time.monotonic() - started
    if not result.summary.ok:
        sys.exit("deploy failed: " + "; ".join(result.summary.lines()))
    trips = max(sum(1 for r in result.command_log.for_node(n) if r.seconds) for n in names)
    print(f"  {name} on {len(names)} host(s): {seconds:.2f}s, steps done at "
          + ", ".join(f"{step} {at:.2f}s" for step, at in ends.items())
          + f"; at most {trips} round trips per node", flush=True)
    return seconds, result


def one_round() -> tuple[float, float, float, int]:
    os.environ["GEOTRAIN_HOME"] = tempfile.mkdtemp(prefix="geotrain-bench-")
    hosts = create(5)
    try:
        store = Store()
        names = add_host_nodes(store, hosts)
        single, _ = _timed(store, "one", names[:1], hosts, MESH_SUBNET)
        four, _ = _timed(store, "four", names[1:], hosts, "10.205.0.0/24")
        noop, result = _timed(store, "four", names[1:], hosts)
        return single, four, noop, len(result.command_log.changes())
    finally:
        testhosts.teardown(PREFIX)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    reason = testhosts.skip_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    rows = []
    for index in range(args.rounds):
        single, four, noop, changes = one_round()
        rows.append((single, four, noop))
        print(f"round {index + 1}: 1 host {single:.2f}s, 4 hosts {four:.2f}s "
              f"({four / single:.2f}x), no-op re-run {noop:.2f}s ({noop / four:.0%} of the "
              f"first, {changes} changing commands)", flush=True)
    parallel = statistics.median(four / single for single, four, _ in rows)
    rerun = statistics.median(noop / four for _, four, noop in rows)
    print(f"median of {args.rounds} rounds: 4 hosts / 1 host = {parallel:.2f}x (target <= 1.3x); "
          f"no-op / first = {rerun:.1%} (target <= 10%)")
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
