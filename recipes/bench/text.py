"""The natural-text bench task: steps and bytes for each preset to reach DDP's held-out loss.

    python -m recipes.bench --task text --quick --seeds 2 --json text.json

Text: the English prose of Python's own documentation that ships with every CPython
(`pydoc_data/topics.py`, ~465 KB over 79 topics; PSF licence), byte tokens. Topics in
name order; the last ones making up >= 10% of the bytes are held out (never trained on).
The training topics are cut at paragraph breaks into ~1 KB passages in a fixed shuffled
order, so the loader's round-robin split gives each worker a random half of every topic,
as c4's independent rows do (`--shards topics`: one row per topic, each worker its own
half of the topics: non-IID shards).
Each method is one real 2-worker torchrun of 2N steps whose learning rate decays over
the first N (then stays at the floor), evaluated every `eval_every` steps on the weights
the ranks agree on (DiLoCo's outer weights). Its loss at step N is the equal-compute
figure; `reach_step` is the first evaluated step whose held-out loss is at most DDP's
loss at step N, and `reach_bytes` what one rank had sent by then.
"""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path

HELDOUT_FRACTION = 0.10
PASSAGE_BYTES = 1024
TEXT_SHARED = ["data.source=c4", "data.tokenizer=bytes", "data.batch_size=8", "data.seq_len=64",
               "optim.lr=0.003", "optim.warmup_steps=50", "logging.wandb=false", "checkpoint.every=0",
               "checkpoint.resume=false", "logging.log_every=100"]


def corpus_documents() -> list[tuple[str, str]]:
    """(topic, text) pairs of the stdlib's pydoc topics, in name order."""
    from pydoc_data.topics import topics

    return sorted(topics.items())


def split_documents(docs: list[tuple[str, str]], fraction: float = HELDOUT_FRACTION):
    """(train, held_out): the last documents whose bytes reach `fraction` of the total are held out."""
    total = sum(len(text.encode()) for _, text in docs)
    held, size = [], 0
    for doc in reversed(docs):
        if size >= fraction * total:
            break
        held.insert(0, doc)
        size += len(doc[1].encode())
    return docs[:len(docs) - len(held)], held


def passages(docs: list[tuple[str, str]], size: int = PASSAGE_BYTES, seed: int = 0) -> list[tuple[str, str]]:
    """The documents cut at paragraph breaks into passages of at least `size` bytes (a document's
    last passage may be shorter), in a fixed shuffled order: rows like c4's, each a piece of one
    topic, so that the loader's round-robin split gives every worker a random half of every topic."""
    out = []
    for topic, text in docs:
        piece: list[str] = []
        for para in text.split("\n\n"):
            piece.append(para)
            if len("\n\n".join(piece).encode()) >= size:
                out.append((topic, "\n\n".join(piece)))
                piece = []
        if piece:
            out.append((topic, "\n\n".join(piece)))
    random.Random(seed).shuffle(out)
    return out


def write_corpus(folder: Path, shards: str = "passages") -> dict:
    """`pydoc-train.jsonl` and `pydoc-validation.jsonl` (a `text` column) for the c4 loader.
    shards="passages": training rows are shuffled passages (every worker sees every topic);
    "topics": one row per topic in name order (each worker gets its own half of the topics)."""
    folder.mkdir(parents=True, exist_ok=True)
    train, held = split_documents(corpus_documents())
    rows = passages(train) if shards == "passages" else train
    for name, docs in (("pydoc-train.jsonl", rows), ("pydoc-validation.jsonl", held)):
        with (folder / name).open("w") as fh:
            for topic, text in docs:
                fh.write(json.dumps({"topic": topic, "text": text}) + "\n")
    return {"train_docs": len(train), "heldout_docs": len(held), "train_rows": len(rows), "shards": shards,
            "train_bytes": sum(len(t.encode()) for _, t in train), "heldout_bytes": sum(len(t.encode()) for _, t in held)}


def reach(curve: list[dict], target: float) -> tuple[int | None, int | None]:
    """First (step, bytes_sent) of `curve` (points {step, eval_loss, bytes_sent}, any order) whose
    held-out loss is at most `target`; (None, None) when no point gets there."""
    for point in sorted(curve, key=lambda p: p["step"]):
        if point["eval_loss"] <= target:
            return point["step"], point["bytes_sent"]
    return None, None


def at_step(curve: list[dict], step: int) -> dict:
    """The curve's point at exactly `step` (the equal-compute point)."""
    for point in curve:
        if point["step"] == step:
            return point
    raise ValueError(f"no evaluation at step {step}; eval_every must divide the steps")


def summarise(name: str, curve: list[dict], steps: int, ddp_loss: float, ddp_bytes: int) -> dict:
    """One method's figures against DDP's loss and bytes at `steps`."""
    point = at_step(curve, steps)
    step, sent = reach(curve, ddp_loss)
    return {"bytes_per_rank": point["bytes_sent"], "loss": point["eval_loss"], "steps": steps,
            "loss_vs_ddp": point["eval_loss"] / ddp_loss, "bytes_vs_ddp": ddp_bytes / max(1, point["bytes_sent"]),
            "reach_step": step, "reach_bytes": sent,
            "reach_steps_vs_ddp": None if step is None else step / steps,
            "reach_bytes_vs_ddp": None if step is None else ddp_bytes / max(1, sent),
            "curve": curve}


def worst_of(runs: list[dict], name: str) -> dict:
    """Across seeds: the mean loss, and the slowest reach (null if any seed never reached)."""
    ms = [r["methods"][name] for r in runs]
    steps = [m["reach_step"] for m in ms]
    reached = None not in steps
    worst = max(ms, key=lambda m: m["reach_step"]) if reached else None
    return {"bytes_per_rank": ms[0]["bytes_per_rank"], "steps": ms[0]["steps"],
            "loss": sum(m["loss"] for m in ms) / len(ms),
            "loss_vs_ddp": sum(m["loss_vs_ddp"] for m in ms) / len(ms),
            "bytes_vs_ddp": min(m["bytes_vs_ddp"] for m in ms),
            "reach_step": worst["reach_step"] if reached else None,
            "reach_bytes": worst["reach_bytes"] if reached else None,
            "reach_steps_vs_ddp": worst["reach_steps_vs_ddp"] if reached else None,
            "reach_bytes_vs_ddp": min(m["reach_bytes_vs_ddp"] for m in ms) if reached else None}


def run_text(methods: list[str], steps: int, seeds: list[int], eval_every: int, eval_batches: int,
             run_method, overrides: dict[str, list[str]], ddp_curves: dict[int, list[dict]] | None = None,
             shards: str = "passages") -> dict:
    """Every method on every seed; `run_method(name, overrides, workdir) -> result.json dict`.
    `ddp_curves` (seed -> curve, from an earlier report of the same settings) skips DDP's runs."""
    if steps % eval_every:
        raise ValueError(f"--eval-every {eval_every} must divide --steps {steps}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="geotrain-bench-text-") as tmp:
        corpus = write_corpus(Path(tmp) / "corpus", shards)
        for seed in seeds:
            shared = [*TEXT_SHARED, f"data.path={Path(tmp) / 'corpus'}", f"seed={seed}", f"steps={2 * steps}",
                      f"optim.schedule_steps={steps}", f"logging.eval_every={eval_every}",
                      f"logging.eval_batches={eval_batches}"]
            curves = {}
            for name in methods:
                if name == "ddp" and ddp_curves and seed in ddp_curves:
                    curves[name] = ddp_curves[seed]
                    continue
                result = run_method(name, [*shared, *overrides[name]], Path(tmp) / f"seed{seed}")
                curves[name] = result["eval_curve"]
                last = at_step(curves[name], steps)
                print(f"seed {seed} {name}: loss@{steps} {last['eval_loss']:.4f}, {last['bytes_sent']:,} bytes, "
                      f"{result['wall_s']} s", flush=True)
            ddp = at_step(curves["ddp"], steps)
            runs.append({"seed": seed, "ddp_loss": ddp["eval_loss"], "ddp_bytes": ddp["bytes_sent"],
                         "methods": {name: summarise(name, curves[name], steps, ddp["eval_loss"],
                                                     ddp["bytes_sent"]) for name in methods}})
    return {"task": "text", "corpus": {"source": "CPython pydoc_data/topics.py (PSF licence)", **corpus},
            "ddp_steps": steps, "reach_run_steps": 2 * steps, "eval_every": eval_every, "workers": 2,
            "seeds": seeds, "ddp_loss": sum(r["ddp_loss"] for r in runs) / len(runs),
            "methods": {name: worst_of(runs, name) for name in methods}, "runs": runs}


def merge_reports(reports: list[dict]) -> dict:
    """Reports of the same settings on different seeds (e.g. run one seed at a time) as one report."""
    first = reports[0]
    same = ("ddp_steps", "eval_every", "reach_run_steps")
    if any(o.get("corpus", {}).get("shards") != first.get("corpus", {}).get("shards") for o in reports[1:]):
        raise ValueError("these reports shard the text differently (--shards)")
    for other in reports[1:]:
        if any(other[k] != first[k] for k in same):
            raise ValueError("these reports were run with different steps or evaluation intervals")
    by_seed: dict[int, dict] = {}
    for run in (r for rep in reports for r in rep["runs"]):
        known = by_seed.get(run["seed"])
        if known is None:
            by_seed[run["seed"]] = {**run, "methods": dict(run["methods"])}
        elif known["methods"]["ddp"]["curve"] != run["methods"]["ddp"]["curve"]:
            raise ValueError(f"seed {run['seed']} appears twice with different DDP runs")
        else:  # more methods against the same DDP run (--ddp-from)
            known["methods"].update({k: v for k, v in run["methods"].items() if k != "ddp"})
    runs = [by_seed[s] for s in sorted(by_seed)]
    seeds = [r["seed"] for r in runs]
    names = list(dict.fromkeys(n for r in runs for n in r["methods"] if all(n in o["methods"] for o in runs)))
    merged = {**first, "seeds": seeds, "runs": runs, "ddp_loss": sum(r["ddp_loss"] for r in runs) / len(runs),
              "methods": {n: worst_of(runs, n) for n in names}, "merged_from": len(reports)}
    merged["methods"]["none"] = {**merged["methods"]["ddp"], "same_as": "ddp"}
    return merged


def print_text_table(report: dict) -> None:
    print(f"text task: {report['ddp_steps']} steps x 2 workers (reach run {report['reach_run_steps']}), "
          f"shards: {report.get('corpus', {}).get('shards', 'topics')}, "
          f"seeds {report['seeds']}, DDP held-out loss {report['ddp_loss']:.4f}")
    print(f"{'method':<14}{'bytes/rank':>14}{'vs DDP':>10}{'loss':>9}{'loss/DDP':>10}{'reach step':>12}"
          f"{'x DDP steps':>13}{'reach bytes':>14}{'x fewer':>10}")
    for name, m in report["methods"].items():
        reach_step = "never" if m["reach_step"] is None else str(m["reach_step"])
        ratio = "-" if m["reach_step"] is None else f"{m['reach_steps_vs_ddp']:.2f}"
        rb = "-" if m["reach_bytes"] is None else f"{m['reach_bytes']:,}"
        rbx = "-" if m["reach_bytes_vs_ddp"] is None else f"{m['reach_bytes_vs_ddp']:.0f}x"
        vs = f"{m['bytes_vs_ddp']:.1f}x" if m["bytes_per_rank"] else "-"  # nothing sent yet (H > steps)
        print(f"{name:<14}{m['bytes_per_rank']:>14,}{vs:>10}{m['loss']:>9.4f}"
              f"{m['loss_vs_ddp']:>10.3f}{reach_step:>12}{ratio:>13}{rb:>14}{rbx:>10}")
