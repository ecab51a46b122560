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
Past step N that run trains at the floor learning rate, so `reach_step` understates what a
longer run gets. `--budgets 1.2 1.5` measures that: one more run per factor f, scheduled over
f x N steps, and `budget_reach` is the smallest f whose final held-out loss is at most DDP's
(the compute a user would spend to match DDP's loss). A run's last point is the model it ends
with: a DiLoCo run whose length is not a multiple of H syncs its last partial phase first, and
that sync's bytes count (the 1x figure is the reach run's point at step N, its weights as last
synced, up to H - 1 steps before N). `--parallel K` runs K torchruns at once.
"""

from __future__ import annotations

import json
import random
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HELDOUT_FRACTION = 0.10
PASSAGE_BYTES = 1024
# Adam beta1 0.5 for every method: DDP ends 1.7-4.1% lower than at the configs' 0.9 (README "Adam beta1 0.5 on
# the text bench"); the presets' outer lr, and medium's H, follow it (presets.yaml *_by_beta1).
TEXT_SHARED = ["data.source=c4", "data.tokenizer=bytes", "data.batch_size=8", "data.seq_len=64",
               "optim.lr=0.003", "optim.betas=[0.5,0.95]", "optim.warmup_steps=50", "logging.wandb=false",
               "checkpoint.every=0", "checkpoint.resume=false", "logging.log_every=100"]


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


def finished_curve(result: dict) -> list[dict]:
    """A run's curve whose last point is the model the run ends with: after the sync of a last
    partial DiLoCo phase (and its bytes), which the evaluation during the run's last step precedes."""
    curve = [dict(point) for point in result["eval_curve"]]
    if curve and curve[-1]["step"] == result["step"] and "eval_loss" in result:
        curve[-1].update(eval_loss=result["eval_loss"], bytes_sent=result["bytes_sent"])
    return curve


def at_step(curve: list[dict], step: int) -> dict:
    """The curve's point at exactly `step` (the equal-compute point)."""
    for point in curve:
        if point["step"] == step:
            return point
    raise ValueError(f"no evaluation at step {step}; eval_every must divide the steps")


def summarise(name: str, curve: list[dict], steps: int, ddp_loss: float, ddp_bytes: int,
              budgets: dict[float, dict] | None = None) -> dict:
    """One method's figures against DDP's loss and bytes at `steps`. `budgets`: factor f -> the
    last point of a run scheduled over f x steps; `budget_reach` is the smallest f whose loss is
    at most DDP's (None when none is), with the bytes that run sent."""
    point = at_step(curve, steps)
    step, sent = reach(curve, ddp_loss)
    out = {"bytes_per_rank": point["bytes_sent"], "loss": point["eval_loss"], "steps": steps,
           "loss_vs_ddp": point["eval_loss"] / ddp_loss, "bytes_vs_ddp": ddp_bytes / max(1, point["bytes_sent"]),
           "reach_step": step, "reach_bytes": sent,
           "reach_steps_vs_ddp": None if step is None else step / steps,
           "reach_bytes_vs_ddp": None if step is None else ddp_bytes / max(1, sent),
           "curve": curve}
    if budgets:
        budgets = {1.0: point, **budgets}  # the equal-compute point is the 1x budget
        met = sorted(f for f, last in budgets.items() if last["eval_loss"] <= ddp_loss)
        out["budget_losses"] = {f"{f:g}": last["eval_loss"] for f, last in sorted(budgets.items())}
        out["budget_reach"] = met[0] if met else None
        out["budget_reach_bytes_vs_ddp"] = ddp_bytes / max(1, budgets[met[0]]["bytes_sent"]) if met else None
    return out


def worst_of(runs: list[dict], name: str) -> dict:
    """Across seeds: the mean loss, and the slowest reach (null if any seed never reached)."""
    ms = [r["methods"][name] for r in runs]
    steps = [m["reach_step"] for m in ms]
    reached = None not in steps
    worst = max(ms, key=lambda m: m["reach_step"]) if reached else None
    out = {"bytes_per_rank": ms[0]["bytes_per_rank"], "steps": ms[0]["steps"],
           "loss": sum(m["loss"] for m in ms) / len(ms),
           "loss_vs_ddp": sum(m["loss_vs_ddp"] for m in ms) / len(ms),
           "bytes_vs_ddp": min(m["bytes_vs_ddp"] for m in ms),
           "reach_step": worst["reach_step"] if reached else None,
           "reach_bytes": worst["reach_bytes"] if reached else None,
           "reach_steps_vs_ddp": worst["reach_steps_vs_ddp"] if reached else None,
           "reach_bytes_vs_ddp": min(m["reach_bytes_vs_ddp"] for m in ms) if reached else None}
    if all("budget_reach" in m for m in ms):
        factors = [m["budget_reach"] for m in ms]
        met = None not in factors
        out["budget_reach"] = max(factors) if met else None
        out["budget_reach_bytes_vs_ddp"] = min(m["budget_reach_bytes_vs_ddp"] for m in ms) if met else None
    return out


def budget_steps(steps: int, factor: float, eval_every: int) -> int:
    """factor x steps, rounded to the evaluation interval (the run's last point is evaluated);
    the report gives the factor of the length run, not the one asked for."""
    total = round(factor * steps / eval_every) * eval_every
    if total <= steps:
        least = (steps + eval_every) / steps
        raise ValueError(f"--budgets {factor:g}: {factor:g} x {steps} steps is not past {steps} at the evaluation "
                         f"interval {eval_every}; give factors of at least {least:.4g}")
    return total


def run_text(methods: list[str], steps: int, seeds: list[int], eval_every: int, eval_batches: int,
             run_method, overrides: dict[str, list[str]], ddp_curves: dict[int, list[dict]] | None = None,
             shards: str = "passages", budgets: tuple[float, ...] = (), parallel: int = 1) -> dict:
    """Every method on every seed; `run_method(label, overrides, workdir) -> result.json dict`.
    `ddp_curves` (seed -> curve, from an earlier report of the same settings) skips DDP's runs;
    `budgets` adds a run scheduled over f x steps per method (not DDP) and factor; `parallel` runs
    that many at once (each run is 2 workers on a thread each)."""
    if steps % eval_every:
        raise ValueError(f"--eval-every {eval_every} must divide --steps {steps}")
    totals = sorted({budget_steps(steps, f, eval_every) for f in budgets})  # each length once
    lengths = {total / steps: total for total in totals}  # the factor actually run -> its steps
    budgets = tuple(lengths)
    with tempfile.TemporaryDirectory(prefix="geotrain-bench-text-") as tmp:
        corpus = write_corpus(Path(tmp) / "corpus", shards)
        jobs = [(seed, name, None) for seed in seeds for name in methods
                if not (name == "ddp" and ddp_curves and seed in ddp_curves)]
        jobs += [(seed, name, f) for seed in seeds for name in methods if name != "ddp" for f in budgets]

        def one(job):
            seed, name, factor = job
            total, schedule = (2 * steps, steps) if factor is None else (lengths[factor], lengths[factor])
            shared = [*TEXT_SHARED, f"data.path={Path(tmp) / 'corpus'}", f"seed={seed}", f"steps={total}",
                      f"optim.schedule_steps={schedule}", f"logging.eval_every={eval_every}",
                      f"logging.eval_batches={eval_batches}"]
            label = name if factor is None else f"{name}@{factor:.4g}x"
            try:
                result = run_method(label, [*shared, *overrides[name]], Path(tmp) / f"seed{seed}")
            except RuntimeError as err:
                raise RuntimeError(f"seed {seed}: {err}") from None
            curve = finished_curve(result)
            last = at_step(curve, steps if factor is None else total)
            print(f"seed {seed} {label}: loss@{steps if factor is None else total} {last['eval_loss']:.4f}, "
                  f"{last['bytes_sent']:,} bytes, {result['wall_s']} s", flush=True)
            return job, curve

        pool = ThreadPoolExecutor(max_workers=max(1, parallel))
        try:
            curves = dict(pool.map(one, jobs))
        finally:  # after a failure, start no more runs; the corpus stays until the running ones end
            pool.shutdown(wait=True, cancel_futures=True)
    runs = []
    for seed in seeds:
        ddp_curve = curves.get((seed, "ddp", None)) or ddp_curves[seed]
        ddp = at_step(ddp_curve, steps)
        summaries = {}
        for name in methods:
            curve = ddp_curve if name == "ddp" else curves[(seed, name, None)]
            ends = {f: at_step(curves[(seed, name, f)], lengths[f]) for f in budgets} if name != "ddp" else None
            summaries[name] = summarise(name, curve, steps, ddp["eval_loss"], ddp["bytes_sent"], ends)
        runs.append({"seed": seed, "ddp_loss": ddp["eval_loss"], "ddp_bytes": ddp["bytes_sent"], "methods": summaries})
    return {"task": "text", "corpus": {"source": "CPython pydoc_data/topics.py (PSF licence)", **corpus},
            "ddp_steps": steps, "reach_run_steps": 2 * steps, "eval_every": eval_every, "workers": 2,
            "finished_model": True,  # a run's last point is its finished model (finished_curve)
            "shared": list(TEXT_SHARED),  # every method's settings (a report without them ran at Adam beta1 0.9)
            "sets": {name: list(overrides[name]) for name in methods},  # and each method's own (--set)
            "budgets": list(budgets), "seeds": seeds, "ddp_loss": sum(r["ddp_loss"] for r in runs) / len(runs),
            "methods": {name: worst_of(runs, name) for name in methods}, "runs": runs}


def _settings(items: list[str]) -> dict[str, str]:
    """key -> value of `key=value` settings, a later one winning as in a run."""
    return dict(item.partition("=")[::2] for item in items)


def settings_differ(a: dict, b: dict, names: list[str]) -> str | None:
    """In words, how report `a` ran the methods `names` differently from report `b` (every method's
    settings, then each one's own); None when alike."""
    if ("shared" in a) != ("shared" in b):
        return "one of them records no settings: it was made before reports recorded them, at Adam beta1 0.9"
    pairs = [("every method", _settings(a.get("shared", [])), _settings(b.get("shared", [])))]
    pairs += [(name, _settings(a.get("sets", {}).get(name, [])), _settings(b.get("sets", {}).get(name, [])))
              for name in names]
    said = [f"{who} {key}={x.get(key, '(unset)')} against {y.get(key, '(unset)')}"
            for who, x, y in pairs for key in sorted(set(x) | set(y)) if x.get(key) != y.get(key)]
    return "; ".join(said) or None


def merge_reports(reports: list[dict]) -> dict:
    """Reports of the same settings on different seeds (e.g. run one seed at a time) as one report."""
    first = reports[0]
    same = ("ddp_steps", "eval_every", "reach_run_steps")
    if any(o.get("budgets", []) != first.get("budgets", []) for o in reports[1:]):
        raise ValueError("these reports were run with different --budgets")
    if len({bool(o.get("finished_model")) for o in reports}) > 1:
        raise ValueError("these reports end their runs differently (some on the finished model, some on the last "
                         "whole-phase sync, before that change): run the older seeds again")
    for other in reports[1:]:
        both = [n for n in first.get("methods", {}) if n in other.get("methods", {}) and n != "none"]
        differ = settings_differ(first, other, list(dict.fromkeys(["ddp", *both])))
        if differ:
            raise ValueError(f"these reports were run with different settings ({differ}): "
                             "run the older seeds again with this bench")
    for key in ("transformers", "datasets"):  # the model's build and the text's order; an older report records none
        if len({o.get(key) for o in reports}) > 1:
            raise ValueError(f"these reports were run with different {key} versions ("
                             f"{', '.join(sorted(str(o.get(key, 'not recorded')) for o in reports))}): "
                             "merge reports from one machine setup")
    for key in ("device", "torch"):  # DDP's loss moves with the torch build and the device
        seen = {o[key] for o in reports if key in o}
        if len(seen) > 1:
            raise ValueError(f"these reports were run with different {key}{'s' if key == 'device' else ' versions'} "
                             f"({', '.join(sorted(seen))}): "
                             "merge reports from one machine setup")
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
    budgets = report.get("budgets") or []
    extra = f"{'budget x':>10}{'x fewer':>10}" if budgets else ""
    if budgets:
        print(f"budget x: the smallest of {', '.join(f'{f:g}' for f in budgets)} x DDP's steps whose run, "
              "scheduled over that many steps, ends at DDP's loss or below (- if none)")
    print(f"{'method':<14}{'bytes/rank':>14}{'vs DDP':>10}{'loss':>9}{'loss/DDP':>10}{'reach step':>12}"
          f"{'x DDP steps':>13}{'reach bytes':>14}{'x fewer':>10}{extra}")
    for name, m in report["methods"].items():
        reach_step = "never" if m["reach_step"] is None else str(m["reach_step"])
        ratio = "-" if m["reach_step"] is None else f"{m['reach_steps_vs_ddp']:.2f}"
        rb = "-" if m["reach_bytes"] is None else f"{m['reach_bytes']:,}"
        rbx = "-" if m["reach_bytes_vs_ddp"] is None else f"{m['reach_bytes_vs_ddp']:.0f}x"
        vs = f"{m['bytes_vs_ddp']:.1f}x" if m["bytes_per_rank"] else "-"  # nothing sent yet (H > steps)
        tail = ""
        if budgets:
            factor = 1.0 if name in ("ddp", "none") else m.get("budget_reach")
            b = "-" if factor is None else f"{factor:.2f}"
            bx = "-" if m.get("budget_reach_bytes_vs_ddp") is None else f"{m['budget_reach_bytes_vs_ddp']:.0f}x"
            tail = f"{b:>10}{bx:>10}"
        print(f"{name:<14}{m['bytes_per_rank']:>14,}{vs:>10}{m['loss']:>9.4f}"
              f"{m['loss_vs_ddp']:>10.3f}{reach_step:>12}{ratio:>13}{rb:>14}{rbx:>10}{tail}")
