"""The natural-text bench task's pieces: reach on hand-made curves, the corpus split, held-out text."""

from __future__ import annotations

import json

import pytest

from recipes.bench.text import (budget_steps, corpus_documents, finished_curve, reach, split_documents, summarise,
                                worst_of, write_corpus)
from recipes.config import parse_config

DDP_FINAL = 2.50


def _curve(losses: list[float], every: int = 50, bytes_per_step: int = 10) -> list[dict]:
    return [{"step": every * (i + 1), "eval_loss": loss, "bytes_sent": bytes_per_step * every * (i + 1)}
            for i, loss in enumerate(losses)]


def test_reach_is_the_first_evaluated_step_at_or_below_the_target():
    curve = _curve([3.0, 2.7, 2.55, 2.50, 2.40, 2.52])  # touches the target exactly at step 200
    assert reach(curve, DDP_FINAL) == (200, 2000)
    assert reach(list(reversed(curve)), DDP_FINAL) == (200, 2000)  # order of the points does not matter
    assert reach(curve, 2.45) == (250, 2500)  # the later bounce back above does not undo a reach


def test_a_curve_that_never_gets_there_reaches_nothing():
    curve = _curve([3.0, 2.8, 2.6, 2.51, 2.505, 2.501])
    assert reach(curve, DDP_FINAL) == (None, None)
    assert reach([], DDP_FINAL) == (None, None)


def test_a_runs_last_point_is_the_model_it_ends_with():
    curve = _curve([3.0, 2.7, 2.6])  # evaluated during step 150, before the last partial phase synced
    result = {"step": 150, "eval_loss": 2.55, "bytes_sent": 1600, "eval_curve": curve}
    ended = finished_curve(result)
    assert ended[-1] == {"step": 150, "eval_loss": 2.55, "bytes_sent": 1600}
    assert ended[:2] == curve[:2] and curve[-1]["eval_loss"] == 2.6  # the run's own curve is left as it was
    stopped_early = {**result, "step": 120}  # a curve that does not end on the run's last step is kept whole
    assert finished_curve(stopped_early) == curve


def test_summary_compares_with_ddp_at_equal_steps_and_worst_seed_wins():
    ddp = _curve([2.9, 2.5, 2.45, 2.4], bytes_per_step=1000)  # DDP's loss at step 100 is the target
    slow = _curve([3.0, 2.7, 2.55, 2.49], bytes_per_step=1)
    never = _curve([3.0, 2.7, 2.6, 2.55], bytes_per_step=1)
    m = summarise("slow", slow, 100, 2.5, 100_000)
    assert (m["reach_step"], m["reach_bytes"], m["reach_steps_vs_ddp"]) == (200, 200, 2.0)
    assert m["loss"] == 2.7 and m["bytes_per_rank"] == 100 and m["reach_bytes_vs_ddp"] == 500
    assert summarise("ddp", ddp, 100, 2.5, 100_000)["reach_step"] == 100
    runs = [{"methods": {"x": summarise("x", slow, 100, 2.5, 100_000)}},
            {"methods": {"x": summarise("x", never, 100, 2.5, 100_000)}}]
    assert worst_of(runs, "x")["reach_step"] is None  # both seeds must reach
    runs[1] = {"methods": {"x": summarise("x", _curve([2.6, 2.5]), 100, 2.5, 100_000)}}
    assert worst_of(runs, "x")["reach_step"] == 200


def test_budget_reach_is_the_smallest_run_length_that_ends_at_ddps_loss():
    curve = _curve([3.0, 2.7], bytes_per_step=1)  # 2.7 at step 100: the 1x budget misses 2.5
    ends = {1.2: {"step": 120, "eval_loss": 2.52, "bytes_sent": 120},
            2.0: {"step": 200, "eval_loss": 2.41, "bytes_sent": 200},
            1.5: {"step": 150, "eval_loss": 2.50, "bytes_sent": 150}}  # exactly DDP's: reaches
    m = summarise("x", curve, 100, 2.5, 100_000, ends)
    assert m["budget_reach"] == 1.5 and m["budget_reach_bytes_vs_ddp"] == 100_000 / 150
    assert m["budget_losses"] == {"1": 2.7, "1.2": 2.52, "1.5": 2.50, "2": 2.41}
    assert summarise("x", _curve([3.0, 2.49]), 100, 2.5, 100_000, ends)["budget_reach"] == 1.0
    short = {1.2: {**ends[1.2], "eval_loss": 2.6}}
    missed = summarise("x", curve, 100, 2.5, 100_000, short)
    assert missed["budget_reach"] is None and missed["budget_reach_bytes_vs_ddp"] is None
    later = summarise("x", curve, 100, 2.5, 100_000, {**ends, 1.5: {**ends[1.5], "eval_loss": 2.55}})  # needs 2x
    runs = [{"methods": {"x": m}}, {"methods": {"x": later}}]
    assert worst_of(runs, "x")["budget_reach"] == 2.0  # the slower seed's
    runs[1] = {"methods": {"x": missed}}
    assert worst_of(runs, "x")["budget_reach"] is None  # both seeds must get there
    assert "budget_reach" not in summarise("x", curve, 100, 2.5, 100_000)  # no budget runs: no figure


def test_budget_lengths_round_to_the_evaluation_interval_and_must_exceed_the_steps():
    assert budget_steps(1500, 1.2, 50) == 1800
    assert budget_steps(1500, 1.05, 50) == 1600  # 1575 rounds to an evaluated step
    for bad in (1.0, 0.8, 1.01):
        with pytest.raises(ValueError, match=r"give factors of at least 1\.033$"):
            budget_steps(1500, bad, 50)


def test_corpus_is_stdlib_prose_with_a_disjoint_heldout_tail(tmp_path):
    docs = corpus_documents()
    train, held = split_documents(docs)
    assert train + held == docs and held and train
    held_bytes = sum(len(t.encode()) for _, t in held)
    total = sum(len(t.encode()) for _, t in docs)
    assert held_bytes >= 0.10 * total and held_bytes - len(held[0][1].encode()) < 0.10 * total
    info = write_corpus(tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "pydoc-validation.jsonl").read_text().splitlines()]
    assert [r["topic"] for r in rows] == [t for t, _ in held] and info["heldout_docs"] == len(held)
    assert not {r["topic"] for r in rows} & {json.loads(line)["topic"] for line in
                                            (tmp_path / "pydoc-train.jsonl").read_text().splitlines()}


def test_training_rows_are_shuffled_passages_so_every_worker_sees_every_topic(tmp_path):
    from recipes.bench.text import passages

    train, _ = split_documents(corpus_documents())
    rows = passages(train)
    assert rows == passages(train) and rows != sorted(rows)  # a fixed shuffle
    for topic, text in train:  # cut only at paragraph breaks: a topic's passages rebuild it
        own = [t for name, t in rows if name == topic]
        assert sorted(own) == sorted(_passages_of(text)) and "\n\n".join(_passages_of(text)) == text
    assert all(len(t.encode()) >= 1024 for t in _passages_of(train[0][1])[:-1])
    halves = [{name for name, _ in rows[r::2]} for r in (0, 1)]  # the loader's round-robin split of 2 ranks
    big = {name for name, text in train if len(text.encode()) >= 8 * 1024}
    assert big and big <= halves[0] & halves[1]
    info = write_corpus(tmp_path, shards="topics")
    assert info["train_rows"] == len(train) and info["shards"] == "topics"


def _passages_of(text: str) -> list[str]:
    out, piece = [], []
    for para in text.split("\n\n"):
        piece.append(para)
        if len("\n\n".join(piece).encode()) >= 1024:
            out.append("\n\n".join(piece))
            piece = []
    return out + (["\n\n".join(piece)] if piece else [])


def _cfg(tmp_path, **data):
    return parse_config({"model": "gpt-neo", "size": "tiny", "steps": 4, "out_dir": str(tmp_path / "run"),
                         "data": {"source": "c4", "batch_size": 2, "seq_len": 16, **data}})


def test_text_loader_holds_out_the_validation_files(tmp_path, monkeypatch):
    from recipes.data.c4 import C4Data

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "c4-train.00000.json").write_text("\n".join(json.dumps({"text": "a" * 50}) for _ in range(4)))
    (corpus / "c4-validation.00000.json").write_text(json.dumps({"text": "z" * 60}))
    data = C4Data(_cfg(tmp_path, path=str(corpus)), 0, 1, tmp_path / "run")
    assert set(data.next_batch()["input_ids"].flatten().tolist()) <= {ord("a"), 255}
    held = data.eval_batches(2)
    assert len(held) == 2 and set(held[0]["input_ids"].flatten().tolist()) <= {ord("z"), 255}
    # an explicit eval_path wins; a single training file without one has no held-out text
    single = corpus / "c4-train.00000.json"
    assert C4Data(_cfg(tmp_path, path=str(single)), 0, 1, tmp_path / "run2").eval_batches is None
    other = C4Data(_cfg(tmp_path, path=str(single), eval_path=str(corpus / "c4-validation.00000.json")), 0, 1,
                   tmp_path / "run3")
    assert set(other.eval_batches(1)[0]["input_ids"].flatten().tolist()) <= {ord("z"), 255}


@pytest.mark.parametrize("key", ["optim.schedule_steps", "logging.eval_every", "diloco.fragments", "data.eval_path"])
def test_new_keys_are_in_the_schema(key, tmp_path):
    section, name = key.split(".")
    value = "x" if name == "eval_path" else 2
    cfg = parse_config({"model": "gpt-neo", "size": "tiny"}, [f"{key}={value}"])
    assert getattr(getattr(cfg, section), name) == value


def test_reports_of_one_seed_each_merge_into_the_worst_case():
    from recipes.bench.text import merge_reports

    def report(seed, losses):
        ddp = _curve([2.9, 2.5, 2.45, 2.4], bytes_per_step=1000)
        run = {"seed": seed, "ddp_loss": 2.5, "ddp_bytes": 100_000,
               "methods": {"ddp": summarise("ddp", ddp, 100, 2.5, 100_000),
                           "x": summarise("x", _curve(losses), 100, 2.5, 100_000)}}
        return {"ddp_steps": 100, "eval_every": 50, "reach_run_steps": 200, "runs": [run],
                "methods": {"ddp": {}, "x": {}, "none": {}}}

    merged = merge_reports([report(1, [2.7, 2.6, 2.5, 2.4]), report(0, [2.6, 2.5, 2.4, 2.3])])
    assert merged["seeds"] == [0, 1] and merged["methods"]["x"]["reach_step"] == 150
    assert merged["methods"]["none"]["same_as"] == "ddp"
    more = report(0, [2.7, 2.45])
    more["runs"][0]["methods"]["y"] = more["runs"][0]["methods"].pop("x")  # another method, same DDP run
    merged = merge_reports([report(0, [2.6, 2.5]), more])
    assert merged["seeds"] == [0] and set(merged["methods"]) == {"ddp", "x", "y", "none"}
    assert merged["methods"]["y"]["reach_step"] == 100
    other = report(0, [2.6, 2.5])
    other["runs"][0]["methods"]["ddp"]["curve"] = _curve([2.8, 2.4])
    with pytest.raises(ValueError):
        merge_reports([report(0, [2.6, 2.5]), other])
    gpu, cpu = report(1, [2.6, 2.5]), report(0, [2.6, 2.5])
    gpu["device"], cpu["device"] = "cuda", "cpu"
    with pytest.raises(ValueError, match=r"different devices \(cpu, cuda\): merge reports from one machine setup"):
        merge_reports([cpu, gpu])
    gpu["device"], gpu["torch"], cpu["torch"] = "cpu", "2.11.0", "2.13.0"
    with pytest.raises(ValueError, match="different torch versions"):
        merge_reports([cpu, gpu])
    gpu["torch"], gpu["transformers"] = "2.13.0", "5.24.0"  # the other one made before versions of it were kept
    with pytest.raises(ValueError, match=r"different transformers versions \(5.24.0, not recorded\)"):
        merge_reports([cpu, gpu])
    cpu["transformers"] = "5.1.0"
    with pytest.raises(ValueError, match=r"different transformers versions \(5.1.0, 5.24.0\)"):
        merge_reports([cpu, gpu])
    cpu["transformers"], gpu["datasets"] = "5.24.0", "5.2.0"
    with pytest.raises(ValueError, match=r"different datasets versions \(5.2.0, not recorded\)"):
        merge_reports([cpu, gpu])
    budgeted = report(1, [2.6, 2.5])
    budgeted["budgets"] = [1.2]
    with pytest.raises(ValueError, match="different --budgets"):
        merge_reports([report(0, [2.6, 2.5]), budgeted])
    finished = report(1, [2.6, 2.5])
    finished["finished_model"] = True  # a report from before runs ended on their finished model lacks it
    with pytest.raises(ValueError, match="end their runs differently"):
        merge_reports([report(0, [2.6, 2.5]), finished])
    now, older = report(1, [2.6, 2.5]), report(0, [2.6, 2.5])
    now["shared"], older["shared"] = ["optim.lr=0.003", "optim.betas=[0.5,0.95]"], ["optim.lr=0.003"]
    with pytest.raises(ValueError, match=r"different settings \(every method optim.betas=\[0.5,0.95\] against \(unset\)\): run "):
        merge_reports([now, older])
    older["shared"] = list(now["shared"])
    older["sets"] = {"x": ["gradient_compression=low", "optim.betas=[0.9,0.95]"]}  # --set x:optim.betas=...
    with pytest.raises(ValueError, match=r"\(x gradient_compression=low against \(unset\); x optim.betas=\[0.9,0.95\] "
                                         r"against \(unset\)\)"):
        merge_reports([older, now])
    del older["shared"], older["sets"]  # a report from before the settings were recorded
    with pytest.raises(ValueError, match="records no settings: it was made before reports recorded them, at Adam"):
        merge_reports([now, older])
    assert merge_reports([now, {**older, "shared": now["shared"]}])["seeds"] == [0, 1]
    assert merge_reports([report(0, [2.6, 2.5]), report(1, [2.6, 2.5])])["seeds"] == [0, 1]  # neither records them


def test_a_text_run_records_the_held_out_curve_of_the_agreed_weights(tmp_path):
    import subprocess
    import sys

    from tests.recipes.conftest import REPO, TINY_GPT, recipe_env

    write_corpus(tmp_path / "corpus")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "recipes.train", "--config", str(TINY_GPT), f"out_dir={out}", "steps=20",
           "data.source=c4", f"data.path={tmp_path / 'corpus'}", "data.batch_size=2", "data.seq_len=32",
           "gradient_compression=high", "diloco.inner_steps=10", "optim.schedule_steps=10",
           "logging.eval_every=5", "logging.eval_batches=2", "logging.wandb=false", "checkpoint.every=0"]
    res = subprocess.run(cmd, cwd=REPO, env=recipe_env(), capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    result = json.loads((out / "result.json").read_text())
    curve = result["eval_curve"]
    assert [p["step"] for p in curve] == [5, 10, 15, 20]
    # steps 5 and 15 are mid-phase: the agreed (outer) weights are those of the last sync
    assert curve[0]["eval_loss"] > curve[1]["eval_loss"] and curve[2]["eval_loss"] == curve[1]["eval_loss"]
    assert result["eval_loss"] == curve[3]["eval_loss"]  # step 20 is a sync: the final weights
