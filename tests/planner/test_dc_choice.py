"""The datacenter planner: its arithmetic by hand, its choice on three what-if matrices, the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from core.cli import main
from core.domain import recipe_catalog
from core.errors import InvalidInput
from core.planner import dc_choice
from core.planner import wan_what_if as planner
from core.planner.cluster_inputs import model_params
from core.planner.datacenter_inputs import choose_for_cluster
from core.state.store import Store
from tests.planner.clusters import seed_three_datacenters

WHAT_IF = Path(__file__).resolve().parent / "what_if"
MATRICES = ("even", "bad_link", "far_site")


def _choose(name, step_time=0.8, model="gpt-neo", size="1.3b", steps=10_000):
    return choose_for_cluster(None, None, model, size, step_time=step_time,
                              matrix_file=WHAT_IF / f"{name}.yaml", steps=steps)


@pytest.mark.parametrize("name", MATRICES)
@pytest.mark.parametrize("model,size", [("gpt-neo", "125m"), ("gpt-neo", "1.3b"), ("gpt-neo-x", "1.4b")])
def test_the_choice_is_never_slower_than_every_datacenter(name, model, size):
    for step_time in (0.05, 0.2, 0.8, 3.0):
        result = _choose(name, step_time, model, size)
        assert result.best.seconds <= result.everyone.seconds
        assert result.best.seconds <= result.choices[0].seconds * (1 + dc_choice.TIE)
        assert len(result.choices) == 2 ** len(result.sites) - 1  # every subset priced


def test_the_three_matrices_choose_as_their_comments_say():
    assert _choose("even").best.datacenters == ("ams", "fra", "par")
    bad = _choose("bad_link")
    assert bad.best.datacenters == ("ams", "fra")
    assert bad.reason().startswith("use ams and fra (16 GPUs), preset ")
    # ultra's H=205 hides most of lon's exchange: all three only 1.4% slower, more than TIE
    assert "dropping lon (behind a 10 Mbit/s link) finishes sooner: 2.8 h vs 2.8 h (1.4% longer) with all 3" \
        in bad.reason()
    assert _choose("far_site").best.datacenters == ("ams", "fra", "par", "sgp")
    assert _choose("even").reason().startswith("use all 3 datacenters (24 GPUs)")
    # fast compute: the far site's 16 GPUs with fra beat all four, ams and par being on fast
    # links themselves (not "behind" anything): their few GPUs do not pay for a third party
    fast = _choose("far_site", step_time=0.08)  # (ultra's H=205 hides the exchange from 0.1 s a step on)
    assert fast.best.datacenters == ("fra", "sgp")
    assert "dropping ams and par (their GPUs do not pay for the exchange) finishes sooner: " \
        "18 min vs 19 min with all 4" in fast.reason()


def test_the_slow_link_case_by_hand():
    """All three of bad_link: lon's 10 Mbit/s link paces a hierarchical exchange among K = 3."""
    result = _choose("bad_link")
    every = result.everyone
    params = model_params("gpt-neo", "1.3b")
    preset = {"bits": 1, "block": 1024}  # `ultra`, what the planner picks for all three
    assert every.preset == "ultra" and every.overlap
    payload = math.ceil(params * preset["bits"] / 8) + 4 * math.ceil(params / preset["block"])
    wire = 2 * (3 - 1) / 3 * payload  # reduce-scatter + all-gather: 2(K-1)/K of one payload
    sync = wire / (10e6 / 8 * planner.DEFAULT_EFFICIENCY) + 2 * (3 - 1) * 18 / 2000
    step = 0.8 + max(0.0, sync - 205 * 0.8) / 205  # overlapped: only the excess over H steps waits
    assert every.step_s == pytest.approx(step)
    assert every.seconds == pytest.approx(10_000 * step)  # all 20 GPUs: the steps as given
    two = next(c for c in result.choices if c.datacenters == ("ams", "fra"))
    assert two.mbit_s == 900 and two.latency_ms == 12  # slowest rate, longest round trip, fra-ams
    assert two.seconds == pytest.approx(10_000 * 20 / 16 * two.step_s)  # same data on 16 GPUs
    # a run that fixed overlap off (as the WAN bench's `low` does) is priced so, every set
    fixed = dc_choice.choose(result.sites, result.links, {"ultra": recipe_catalog.presets()["ultra"]},
                             params, 0.8, 10_000, overlap=False)
    every = next(c for c in fixed.choices if len(c.datacenters) == 3)
    assert not any(c.overlap for c in fixed.choices)
    assert every.step_s == pytest.approx(0.8 + sync / 205)


def test_one_datacenter_alone_has_no_wan():
    sites = [dc_choice.Site("a", 8), dc_choice.Site("b", 1)]
    links = {("a", "b"): dc_choice.SiteLink(mbit_s=0.01, latency_ms=300)}
    result = dc_choice.choose(sites, links, {"none": {"algorithm": "ddp", "bits": 32}}, 1000, 1.0, 100)
    assert result.best.datacenters == ("a",) and result.best.mbit_s == math.inf
    assert result.best.seconds == pytest.approx(100 * 9 / 8)


def test_a_missing_link_or_bad_section_is_one_line(tmp_path):
    cases = {
        "datacenters: {a: 2, b: 2, c: 1}\nlinks:\n  - {src: a, dst: b, latency_ms: 1, mbit_s: 10}\n":
            "no measured link between datacenters a and c",
        "datacenters: {a: 0, b: 2}\nlinks:\n  - {src: a, dst: b, latency_ms: 1, mbit_s: 10}\n":
            "gpus must be a whole number",
        "datacenters: {a: 2}\nlinks:\n  - {src: a, dst: b, latency_ms: 1, mbit_s: 10}\n":
            "link endpoint 'b' is in no datacenter",
        "datacenters: {'a b': 2, c: 1}\nlinks:\n  - {src: a, dst: c, latency_ms: 1, mbit_s: 10}\n":
            "is not a Kubernetes label value",
        "datacenters: [a, b]\nlinks:\n  - {src: a, dst: b, latency_ms: 1, mbit_s: 10}\n":
            "`datacenters:` must map names to GPU counts",
    }
    for text, message in cases.items():
        path = tmp_path / "m.yaml"
        path.write_text(text)
        with pytest.raises(InvalidInput) as caught:
            choose_for_cluster(None, None, "gpt-neo", "125m", matrix_file=path)
        assert message in caught.value.message and "\n" not in caught.value.message


def test_a_cluster_plans_from_its_nodes_datacenters_and_stored_matrix(capsys):
    store = Store()
    seed_three_datacenters(store)
    result = choose_for_cluster(store, "eu", "gpt-neo", "1.3b", step_time=0.8)
    assert [(s.name, s.gpus) for s in result.sites] == [("ams", 8), ("fra", 16), ("lon", 4)]
    assert result.best.datacenters == ("ams", "fra") and result.best.mbit_s == 800
    assert main(["clusters", "plan", "eu", "--model", "gpt-neo", "--size", "1.3b", "--step-time", "0.8"]) == 0
    out = capsys.readouterr().out
    assert "chosen: use ams and fra (24 GPUs)" in out and "dropping lon (behind a 10 Mbit/s link)" in out
    assert main(["clusters", "plan", "eu", "--model", "gpt-neo", "--size", "1.3b", "--step-time", "0.8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["datacenters"]["chosen"]["datacenters"] == ["ams", "fra"]
    assert choose_for_cluster(store, "local", "gpt-neo", "tiny") is None  # one machine: nothing to choose


def test_a_cluster_matrix_missing_a_datacenter_pair_still_plans_presets(capsys):
    store = Store()
    seed_three_datacenters(store)
    with store.write() as conn:
        conn.execute("DELETE FROM net_matrix WHERE 'lon-a' IN (src, dst) AND 'ams-a' IN (src, dst)")
    assert main(["clusters", "plan", "eu", "--model", "gpt-neo", "--size", "125m", "--step-time", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "recommended: preset" in out
    assert out.strip().splitlines()[-1].startswith(
        "datacenters: no choice (no measured link between datacenters ams and lon; re-run the network step")
