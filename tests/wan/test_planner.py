"""The WAN planner on hand-computed cases, its inputs (store, files, loopback) and its CLI."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from core.planner import wan_what_if as planner
from core.cli import main
from core.state.cluster_records import save_cluster
from core.errors import InvalidInput, NotFound
from core.domain.records import Cluster
from core.state.store import Store
from core.planner.cluster_inputs import links_from_file, model_params, plan_for_cluster

ROOT = Path(__file__).resolve().parents[2]
PRESETS = {
    "none": dict(algorithm="ddp", inner_steps=1, bits=32, block=0, density=1.0, index_bits=0),
    "low": dict(algorithm="diloco", inner_steps=16, bits=16, block=0, density=1.0, index_bits=0),
    "high": dict(algorithm="diloco", inner_steps=100, bits=4, block=128, density=1.0, index_bits=0),
    "ultra": dict(algorithm="demo", inner_steps=100, bits=8, block=128, density=0.0625, index_bits=6),
}
# 8 Mbit/s = 1e6 bytes/s, 20 ms round trip (10 ms per ring hop) between the two workers
NET = planner.Network(workers=2, mbit_s=8.0, latency_ms=20.0)


def test_payloads_by_hand():
    assert planner.exchange_for(PRESETS["none"], 1000) == planner.Exchange("all_reduce", 4000)
    assert planner.exchange_for(PRESETS["low"], 1000) == planner.Exchange("all_reduce", 2000)
    # 1000 values at 4 bits (500 bytes) + 8 blocks of 128, one fp32 scale each (32 bytes)
    # a dense block codec with error feedback: the flat quantised reduce-scatter + all-gather
    assert planner.exchange_for(PRESETS["high"], 1000) == planner.Exchange("quantised_reduce", 532)
    # 6400 values, 1/16 sent = 400: fp8 values (400 bytes) + 4 scales (16) + 400 six-bit indices (300)
    assert planner.exchange_for(PRESETS["ultra"], 6400) == planner.Exchange("all_gather", 716)
    # a rotation costs no bytes: 1000 values are 1000 signs (125 bytes) + one scale, rotated or not
    rotated = {"algorithm": "diloco", "bits": 1, "block": 1024, "rotate": True}
    assert planner.exchange_for(rotated, 1000) == planner.exchange_for({**rotated, "rotate": False}, 1000) \
        == planner.Exchange("quantised_reduce", 129)
    # without error feedback (ultra) the same reduce-scatter, since the recipe protocol (bytes 2 -> 4 workers <= 1.5x)
    assert planner.exchange_for({**rotated, "error_feedback": False}, 1000) == planner.Exchange("quantised_reduce", 129)


def test_wire_bytes_follow_the_ring():
    reduce, gather = planner.Exchange("all_reduce", 4000), planner.Exchange("all_gather", 544)
    assert reduce.wire_bytes(2) == 4000 and reduce.wire_bytes(4) == 6000 and reduce.wire_bytes(1) == 0
    assert gather.wire_bytes(4) == 3 * 544 and gather.rounds(4) == 3 and reduce.rounds(4) == 6


def test_ddp_step_by_hand():
    # 250k params fp32 = 1e6 bytes, all-reduce on 2 workers sends 1e6 bytes: 1 s + 2 rounds x 10 ms
    e = planner.estimate("none", PRESETS["none"], 250_000, 0.1, NET, efficiency=1.0)
    assert e.sync_s == pytest.approx(1.02)
    assert e.step_s == pytest.approx(1.12)
    assert e.utilization == pytest.approx(0.1 / 1.12)
    assert e.wan_share == pytest.approx(1.02 / 1.12)
    assert e.step_s_overlap == e.step_s  # DDP has no outer sync to overlap


def test_diloco_step_and_overlap_by_hand():
    # bf16: 5e5 bytes -> 0.52 s per sync, spread over H=16 steps of 0.1 s
    e = planner.estimate("low", PRESETS["low"], 250_000, 0.1, NET, efficiency=1.0)
    assert e.step_s == pytest.approx(0.1 + 0.52 / 16)
    assert e.step_s_overlap == pytest.approx(0.1)  # 0.52 s hides behind 1.6 s of compute
    assert e.utilization_overlap == pytest.approx(1.0)
    # with 0.01 s steps the sync outlasts the 0.16 s of compute by 0.36 s
    short = planner.estimate("low", PRESETS["low"], 250_000, 0.01, NET, efficiency=1.0)
    assert short.step_s_overlap == pytest.approx(0.01 + 0.36 / 16)


def test_efficiency_scales_only_the_transfer():
    e = planner.estimate("none", PRESETS["none"], 250_000, 0.1, NET, efficiency=0.5)
    assert e.sync_s == pytest.approx(2.02)


def test_recommends_least_compression_that_reaches_target():
    result = planner.plan(PRESETS, 250_000, 0.1, NET, target=0.95, efficiency=1.0)
    assert (result.recommended, result.overlap, result.reaches_target) == ("low", True, True)
    loose = planner.plan(PRESETS, 250_000, 0.1, NET, target=0.05, efficiency=1.0)
    assert (loose.recommended, loose.overlap) == ("none", False)
    assert "preset low at H=8 (diloco.inner_steps: 8) with overlap" in result.summary()


def test_fewest_inner_steps_for_the_target_by_hand():
    # bf16 sync 0.52 s, 0.1 s steps: waited for in full, 0.1 / (0.1 + 0.52 / H) >= 0.95 needs H >= 98.8;
    # overlapped, the wait is 0.52 - 0.1 H, so 0.95 needs H >= 0.95 * 0.52 / 0.1 = 4.94, and the margin
    # (the exchange fills at most 80% of the H steps) H >= 0.52 / (0.8 * 0.1) = 6.5
    assert planner.h_for_utilization(0.52, 0.1, 0.95) == 99
    assert planner.h_for_utilization(0.52, 0.1, 0.95, overlap=True) == 7
    assert planner.h_for_utilization(0.0, 0.1, 0.95) == 1  # no network: any H
    assert planner.h_for_utilization(0.52, 0.1, 1.0) == 0  # waited for in full, 100% is out of reach
    # low (H = 16) reaches 95% with overlap; H = 7 would too, but the planner goes no lower than 8
    result = planner.plan(PRESETS, 250_000, 0.1, NET, target=0.95, efficiency=1.0)
    assert result.inner_steps == planner.H_FLOOR == 8 and result.tuned()
    assert result.utilization_at(result.recommended_estimate(), 8) == pytest.approx(1.0)  # 0.52 s < 0.8 s
    assert result.as_dict()["inner_steps"] == 8 and result.as_dict()["utilization_at_inner_steps"] == pytest.approx(1.0)
    # overlap is not free: the advice says what it measured in loss, and the utilization without it,
    # 0.1 / (0.1 + 0.52 / 8) = 61% at the planner's H, 0.1 / (0.1 + 0.52 / 16) = 75% at the preset's
    assert "ended with 3-9% higher loss than the same runs waiting for each exchange" in result.overlap_note()
    assert result.overlap_note().endswith("; without it: GPU utilization ~61% at H=8, ~75% at H=16 (the preset's own H)")
    assert result.as_dict()["overlap_note"] == result.overlap_note()
    # 0.05 s steps: overlapped, the margin needs H >= 0.52 / (0.8 * 0.05) = 13 (12 steps would hide it: 0.6 s)
    short = planner.plan(PRESETS, 250_000, 0.05, NET, target=0.95, efficiency=1.0)
    assert (short.recommended, short.overlap, short.inner_steps) == ("low", True, 13)
    assert "preset low at H=13 (diloco.inner_steps: 13) with overlap: ~100% GPU utilization" in short.summary()
    # 90% without overlap on a 4x faster link: sync 0.125 + 0.02 s, 0.1 / (0.1 + 0.145 / H) >= 0.9 needs H >= 13.05
    fast = planner.Network(workers=2, mbit_s=32.0, latency_ms=20.0)
    tuned = planner.plan(PRESETS, 250_000, 0.1, fast, target=0.9, efficiency=1.0)
    assert (tuned.recommended, tuned.overlap, tuned.inner_steps) == ("low", False, 14)
    assert "preset low at H=14 (diloco.inner_steps: 14): ~91% GPU utilization" in tuned.summary()
    assert tuned.overlap_note() == ""  # no overlap, nothing to warn about


def test_inner_steps_stay_the_presets_when_the_link_needs_them_all():
    ddp = planner.plan(PRESETS, 250_000, 0.1, NET, target=0.05, efficiency=1.0)
    assert ddp.recommended == "none" and ddp.inner_steps is None and not ddp.tuned()
    slow = planner.plan(PRESETS, 100_000_000, 0.001, NET, target=0.99)  # nothing reaches the target
    assert (slow.recommended, slow.inner_steps, slow.tuned()) == ("ultra", 100, False)
    assert "H=" not in slow.summary()



def test_unreachable_target_picks_the_best_and_says_so():
    result = planner.plan(PRESETS, 100_000_000, 0.001, NET, target=0.99)
    assert not result.reaches_target
    assert result.recommended == "ultra"
    assert "below the 99% target" in result.summary()


def test_single_worker_has_no_wan():
    e = planner.estimate("none", PRESETS["none"], 10**9, 0.2, planner.Network(1, math.inf, 0.0))
    assert e.step_s == 0.2 and e.utilization == 1.0


def test_bottleneck_is_slowest_link_and_longest_latency():
    links = [planner.Link("a", "b", 5, 100), planner.Link("b", "c", 40, 1000), planner.Link("a", "a", 0, 1)]
    net = planner.bottleneck(links)
    assert (net.workers, net.mbit_s, net.latency_ms) == (3, 100, 40)
    with pytest.raises(InvalidInput, match="no links"):
        planner.bottleneck([], workers=2)
    with pytest.raises(InvalidInput, match="no usable bandwidth"):
        planner.bottleneck([planner.Link("a", "b", 1, 0)])


def test_bad_numbers_are_refused():
    with pytest.raises(InvalidInput, match="step time"):
        planner.estimate("none", PRESETS["none"], 1000, 0, NET)
    with pytest.raises(InvalidInput, match="target"):
        planner.plan(PRESETS, 1000, 0.1, NET, target=1.5)


def test_matrix_files_yaml_json_and_errors(tmp_path):
    good = tmp_path / "m.yaml"
    good.write_text("links:\n  - {src: fra, dst: nyc, latency_ms: 80, mbit_s: 1000}\n")
    assert links_from_file(good) == [planner.Link("fra", "nyc", 80.0, 1000.0)]
    as_json = tmp_path / "m.json"
    as_json.write_text(json.dumps([{"src": "a", "dst": "b", "latency_ms": 1, "mbit_s": 50}]))
    assert links_from_file(as_json)[0].mbit_s == 50.0
    cases = {"- {src: a, dst: b}\n": "needs the fields", "links: []\n": "has no links",
             "- {src: a, dst: b, latency_ms: -1, mbit_s: 5}\n": "non-negative", "links: [\n": "not valid YAML"}
    for text, message in cases.items():
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(InvalidInput, match=message):
            links_from_file(bad)
    with pytest.raises(InvalidInput, match="cannot read matrix file"):
        links_from_file(tmp_path / "missing.yaml")


def test_cluster_matrix_from_the_store():
    store = Store()
    save_cluster(store, Cluster(name="eu", kind="geotrain"), create=True)
    with pytest.raises(NotFound, match="no measured network matrix"):
        plan_for_cluster(store, "eu", "gpt-neo", "125m", step_time=1.0)
    with store.write() as conn:
        for src, dst in (("fra", "ams"), ("ams", "fra")):
            conn.execute("INSERT INTO net_matrix(cluster, src, dst, latency_ms, mbit_s, measured_at)"
                         " VALUES ('eu', ?, ?, 12.0, 50.0, 0)", (src, dst))
    result = plan_for_cluster(store, "eu", "gpt-neo", "125m", step_time=1.0)
    assert (result.network.workers, result.network.mbit_s, result.network.latency_ms) == (2, 50.0, 12.0)
    assert result.params == model_params("gpt-neo", "125m")
    local = plan_for_cluster(store, "local", "gpt-neo", "tiny", step_time=0.01)
    assert local.network.workers == 2 and local.network.mbit_s > 1000


def test_cli_table_json_and_bad_input(tmp_path, capsys):
    assert main(["clusters", "plan", "local", "--model", "gpt-neo", "--size", "125m", "--step-time", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "recommended: preset" in out and "none" in out and "ultra" in out
    matrix = tmp_path / "m.yaml"
    matrix.write_text("links:\n  - {src: a, dst: b, latency_ms: 0, mbit_s: 8}\n")
    assert main(["clusters", "plan", "--matrix", str(matrix), "--model", "gpt-neo", "--params", "250000",
                 "--step-time", "0.1", "--target", "95%", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["network"]["mbit_s"] == 8 and [p["preset"] for p in data["presets"]][0] == "none"
    assert data["recommended"] == "low" and data["inner_steps"] == 8
    matrix.write_text("links:\n  - {src: a, dst: b, latency_ms: 0, mbit_s: 0.4}\n")  # medium (H=12) has room
    assert main(["clusters", "plan", "--matrix", str(matrix), "--model", "gpt-neo", "--params", "250000",
                 "--step-time", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "recommended: preset medium at H=10 (diloco.inner_steps: 10) with overlap" in out
    assert "H=10: the fewest inner steps (at least 8) that keep the target on this link" in out
    assert "  overlap is not free: each exchange lands one outer step late" in out
    assert "without it: GPU utilization ~57% at H=10, ~62% at H=12 (the preset's own H)" in out
    for argv, message in [(["clusters", "plan", "mars", "--model", "gpt-neo"], "no cluster named 'mars'"),
                          (["clusters", "plan", "--model", "bert"], "unknown model 'bert'"),
                          (["clusters", "plan", "--model", "gpt-neo", "--size", "9b"], "unknown size"),
                          (["clusters", "plan", "--model", "gpt-neo", "--step-time", "-1"], "--step-time"),
                          (["clusters", "plan", "--model", "gpt-neo", "--target", "lots"], "--target")]:
        try:
            code = main(argv)
        except SystemExit as exc:  # never since click: usage errors return 2 too
            code = exc.code
        assert code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_planner_stays_free_of_torch_and_recipes():
    """Only the shared torch-free schema (and the plain catalog it reads) may come along."""
    code = ("import sys, core.planner.wan_what_if, core.planner.cluster_inputs, core.cli.cluster_plan;"
            "shared = ('recipes', 'recipes.catalog', 'recipes.schema');"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'textual') or"
            " (m.split('.')[0] == 'recipes' and m not in shared and not m.startswith('recipes.schema.'))];"
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dense_quantised_presets_cost_an_all_reduce_from_three_workers():
    """The flat exchange reduce-scatters a dense block codec from 3 workers up, ultra's signs without
    error feedback too (recipes/algorithms/exchange.py), so its bytes per worker are 2(N-1)/N of a
    payload; at 2 workers it all-gathers: (N-1)."""
    from core.domain.recipe_catalog import presets
    from core.planner.wan_what_if import exchange_for

    table = presets()
    for name in ("medium", "high", "ultra"):
        ex = exchange_for(table[name], 1_000_000)
        assert ex.wire_bytes(2) == ex.payload_bytes and ex.rounds(2) == 1
        assert ex.wire_bytes(4) == 1.5 * ex.payload_bytes and ex.rounds(4) == 6
