"""`clusters plan` uses what `clusters check` measured (issue 43): each pair's all-reduce bus bandwidth
replaces the network probe's rate where the check measured that pair, and the plan says which figures
it used (measured when, or estimated) beside the streams it assumes. The kept check is built by the
check's own verdict code (core.domain.link_verdicts), as `clusters check` keeps it."""

from __future__ import annotations

import json

from core.cli import main
from core.domain.link_verdicts import cluster_verdict, link_entry
from core.planner.cluster_inputs import plan_for_cluster
from core.planner.datacenter_inputs import choose_for_cluster
from core.state.check_records import keep
from core.state.store import Store
from tests.planner.clusters import RATES, seed_three_datacenters

CHECKED_AT = 1_795_000_000.0  # 2026-11-18 11:06:40 UTC


def _rank(busbw_mb_s: float) -> dict:
    return {"rank": 0, "reduce_bytes": 3283236, "reduce_seconds": 3283236 / (busbw_mb_s * 1e6),
            "busbw": busbw_mb_s * 1e6, "world": 2, "backend": "gloo"}


def _keep_check(store: Store, measured: dict[tuple[str, str], float | None]) -> None:
    """A check of cluster 'eu': MB/s per pair; None = the link failed (its probe figure stays)."""
    links = [link_entry(a, b, [] if mb is None else [_rank(mb), _rank(mb)], failed=None if mb else "timed out")
             for (a, b), mb in measured.items()]
    keep(store, "eu", cluster_verdict("eu", "ssh", [], links, [], at=CHECKED_AT))


def test_the_plan_takes_the_measured_all_reduce_and_says_so(capsys):
    store = Store()
    seed_three_datacenters(store)
    before = plan_for_cluster(store, "eu", "gpt-neo", "125m", step_time=0.5)
    assert before.figures.source == "probe" and before.network.mbit_s == 10  # lon's probe: 10 Mbit/s
    # the check found lon's links carry 5 MB/s (40 Mbit/s) and fra-b <-> ams-a only 50 MB/s (400 Mbit/s);
    # fra-a <-> lon-a failed: its probe figure stays
    measured = {pair: RATES[pair] / 8 for pair in RATES}
    measured.update({("fra-b", "ams-a"): 50.0, ("fra-b", "lon-a"): 5.0, ("ams-a", "lon-a"): 5.0,
                     ("fra-a", "lon-a"): None})
    _keep_check(store, measured)
    after = plan_for_cluster(store, "eu", "gpt-neo", "125m", step_time=0.5)
    assert (after.figures.source, after.figures.measured_links, after.figures.links) == ("measured", 10, 12)
    assert after.network.mbit_s == 10  # the failed pair keeps the probe's 10 Mbit/s: still the bottleneck
    sites = choose_for_cluster(store, "eu", "gpt-neo", "1.3b", step_time=0.8)
    assert sites.best.datacenters == ("ams", "fra") and sites.best.mbit_s == 400  # measured, not the probe's 800
    assert main(["clusters", "plan", "eu", "--model", "gpt-neo", "--size", "125m", "--step-time", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "assumes 1 TCP stream per peer" in out
    assert ("figures: all-reduce bus bandwidth measured by `clusters check` at 2026-11-18 11:06 UTC "
            "(10 of 12 links; the other 2 from the network probe)") in out
    assert main(["clusters", "plan", "eu", "--model", "gpt-neo", "--size", "125m", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["figures"] == {"source": "measured", "measured_links": 10, "links": 12, "checked_at": CHECKED_AT}


def test_without_a_check_the_plan_says_its_figures_are_estimated(capsys):
    store = Store()
    seed_three_datacenters(store)
    assert main(["clusters", "plan", "eu", "--model", "gpt-neo", "--size", "125m"]) == 0
    assert "figures: estimated from the network matrix's probe" in capsys.readouterr().out
    store.set_setting("cluster_check/eu", '{"nodes": [], "links": [{"kind": "node", "ok": true, "a": "fra-a", '
                                         '"b": "fra-b", "busbw": "fast"}]}')  # unreadable figure: ignored
    assert plan_for_cluster(store, "eu", "gpt-neo", "125m").figures.source == "probe"
