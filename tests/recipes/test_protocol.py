"""The recipe protocol's rules (recipes/bench/protocol.py), without training: the text it reads, the
refusals that keep a figure honest, and how a preset's target is judged across seeds."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from recipes.bench import protocol
from recipes.bench.protocol import PROTOCOL, check_no_repeat, summarise, write_corpus

REPO = Path(__file__).resolve().parents[2]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_held_out_text_is_many_modules_never_trained_on(tmp_path):
    stats = write_corpus(tmp_path, workers=4)
    train, held = _rows(tmp_path / "stdlib-train.jsonl"), _rows(tmp_path / "stdlib-validation.jsonl")
    assert {r["module"] for r in train}.isdisjoint({r["module"] for r in held})
    assert stats["heldout_bytes"] >= 64 * 1024 and stats["heldout_modules"] >= 20
    # the c4 loader takes `*validation*` files as held-out and every other file as training text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stdlib-train.jsonl", "stdlib-validation.jsonl"]
    assert stats["train_bytes"] >= 10 * stats["heldout_bytes"] * 0.8


def test_no_run_of_the_protocol_reads_a_workers_text_twice(tmp_path):
    longest = max(round(f * PROTOCOL["ddp_steps"]) for _, f, _ in PROTOCOL["targets"])
    for workers in (2, 4):
        check_no_repeat(write_corpus(tmp_path / str(workers), workers), longest)  # the frozen lengths fit
    with pytest.raises(SystemExit, match="never reads text twice"):
        check_no_repeat(write_corpus(tmp_path / "4", 4), 4 * longest)


def test_scores_never_come_from_a_tuning_seed(tmp_path):
    args = argparse.Namespace(ddp_from=None, presets=["medium"], seeds=[2, 100], workers=4, device="cpu",
                              size="small", datacenters=1, reuse_ddp=None, elastic=False)
    with pytest.raises(SystemExit, match="seeds 0-3 tune"):
        protocol.score(args)


def test_the_protocol_model_is_a_shipped_config_of_at_least_a_million_parameters():
    params = yaml.safe_load((REPO / "recipes" / "params.yaml").read_text())
    assert params[PROTOCOL["model"]][PROTOCOL["size"]] >= 1_000_000
    shipped = yaml.safe_load((REPO / "recipes/configs" / PROTOCOL["model"] / f"{PROTOCOL['size']}.yaml").read_text())
    assert shipped["size"] == PROTOCOL["size"] and shipped["optim"]["betas"][0] == 0.9  # what deploy runs


def _method(loss: float, sent: int, curve: list[tuple[int, float]]) -> dict:
    return {"loss": loss, "bytes_per_worker": sent,
            "curve": [{"step": s, "eval_loss": l, "bytes_sent": sent * s // curve[-1][0]} for s, l in curve]}


def test_a_target_holds_only_when_every_seed_meets_it():
    n = PROTOCOL["ddp_steps"]
    seeds = []
    for ddp_loss, medium_loss in ((2.00, 1.99), (2.10, 2.12)):  # the second seed ends 1% above its DDP
        seeds.append({"methods": {
            "ddp": _method(ddp_loss, 1_000_000, [(n // 2, 2.5), (n, ddp_loss)]),
            "medium": _method(medium_loss, 5_000, [(n // 2, 2.6), (n, ddp_loss + 0.05), (630, medium_loss)])}})
    out = summarise(seeds, [("medium", 1.05, 100)], n)
    m = out["medium"]
    assert m["bytes_ratio"] == 200 and not m["held"]
    assert m["loss_vs_ddp_worst"] == pytest.approx(2.12 / 2.10)
    assert m["reach_factor_worst"] is None  # the second seed never reached its DDP's loss
    assert out["ddp"]["loss_spread"] == pytest.approx(0.10)
    seeds[1]["methods"]["medium"] = _method(2.09, 5_000, [(n // 2, 2.6), (630, 2.09)])
    held = summarise(seeds, [("medium", 1.05, 100)], n)["medium"]
    assert held["held"] and held["reach_factor_worst"] == pytest.approx(630 / n)
