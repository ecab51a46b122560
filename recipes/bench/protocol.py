"""The recipe protocol (issue 39): how every preset figure geotrain states is measured. Frozen
2026-11-28, before any run under it; a figure that does not come from this module is not a claim.

    python -m recipes.bench.protocol tune  --workers 4 --json tune-w4.json     # DDP's sweep (seed 0)
    python -m recipes.bench.protocol score --workers 4 --ddp-from tune-w4.json --json score-w4.json
    python -m recipes.bench.protocol bytes                                       # bytes/rank, 2 vs 4 workers
    python -m recipes.bench.protocol score --datacenters 2 --presets high ultra  # 2 datacenters x 2 workers
    python -m recipes.bench.protocol score --elastic --presets high ultra        # as local deploys DiLoCo
    python -m recipes.bench.protocol score --device cuda --size 125m ...         # the GPU run (>= 20M)

The rules, in code below (PROTOCOL) and in recipes/bench/RESULTS.md:
- What users run: each method is the shipped config of the model and size (`recipes/configs/<model>/
  <size>.yaml`: its optimizer, betas, schedule, warmup, weight decay) with the preset's shipped settings;
  only steps, workers, seed and data change. No `--set`: a preset that needs other settings changes
  presets.yaml, and then DDP runs the same config.
- The model: gpt-neo `small` (1.25M parameters, byte tokens) on CPU; `--size` for a larger one on a GPU.
- The text: docstrings of this Python's standard library (PSF licence; ships with every CPython, so
  offline), one document per module, ~1.2 MB; the modules making up the last 10% of the bytes (in path
  order) are held out and never trained on (~120 KB over many modules, not one topic). The tuning of
  rounds 1-2 used `pydoc_data/topics.py` and a Markov chain, never this text. The run refuses a length
  that would read any worker's share of the training text twice.
- DDP tuned at least as hard as the presets: DDP gets a learning-rate x warmup sweep (half, once and
  twice the shipped lr at the shipped warmup, then the best lr at 100 warmup steps) on the tuning seed;
  the best is the baseline, and the shipped config takes that lr and warmup, so that every preset runs
  it too (recipes/configs/gpt-neo/small.yaml says so). The presets' own settings get no tuning here.
- Frozen, then scored: tuning uses seed 0 only (seeds 0-3 are the tuning seeds); scores come from seeds
  100-102, never used for tuning; worst and mean reported, DDP's own spread across those seeds is the noise.
- The targets (issue 39): each preset runs `factor x N` steps scheduled over that length (what a user
  who deploys that many steps gets) and must end at or below DDP's held-out loss at N steps, with its
  bytes per worker at least `ratio` x fewer than DDP's over N steps. The iso-token curves are kept.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from recipes.bench.local_group import run_ranks
from recipes.bench.text import passages, reach, split_documents

REPO = Path(__file__).resolve().parents[2]
PROTOCOL = {
    "version": 1, "frozen": "2026-11-28",
    "model": "gpt-neo", "size": "small",
    "batch_size": 4, "seq_len": 64,  # per worker and step: 256 tokens
    "ddp_steps": 600,  # N; the longest run (ultra, 1.5 N) reads 900 x 256 tokens per worker
    "eval_every": 30, "eval_batches": 48,  # 12 KB of held-out text per point, the same windows for every method
    "tuning_seeds": [0], "score_seeds": [100, 101, 102],
    # (preset, factor of DDP's steps it may run, bytes ratio it must reach): issue 39's targets
    "targets": [("medium", 1.05, 100), ("high", 1.2, 500), ("ultra", 1.5, 2000)],
}
# DDP's sweep: the shipped lr and half and twice it at the shipped warmup, then the best lr at a long warmup
TUNE_LR_FACTORS, LONG_WARMUP = (0.5, 1.0, 2.0), 100
SKIP_PARTS = {"test", "tests", "idlelib", "lib2to3", "turtledemo", "site-packages", "dist-packages", "__pycache__"}
MIN_DOC_BYTES = 200


def stdlib_documents() -> list[tuple[str, str]]:
    """(module path, its docstrings joined) for every stdlib module with some prose, in path order.
    Parsed with `ast`, never imported."""
    root = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if SKIP_PARTS & set(rel.parts):
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        texts = [ast.get_docstring(node) for node in ast.walk(tree)
                 if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
        text = "\n\n".join(t for t in texts if t and len(t.encode()) >= MIN_DOC_BYTES)
        if text:
            docs.append((rel.as_posix(), text))
    return docs


def write_corpus(folder: Path, workers: int) -> dict:
    """`stdlib-train.jsonl` (shuffled ~1 KB passages) and `stdlib-validation.jsonl` (held-out modules),
    and the fewest training bytes any of `workers` ranks gets (rows go round-robin to ranks)."""
    folder.mkdir(parents=True, exist_ok=True)
    train, held = split_documents(stdlib_documents())
    rows = passages(train)
    for name, docs in (("stdlib-train.jsonl", rows), ("stdlib-validation.jsonl", held)):
        with (folder / name).open("w") as fh:
            for module, text in docs:
                fh.write(json.dumps({"module": module, "text": text}) + "\n")
    shares = [sum(len(t.encode()) + 1 for _, t in rows[r::workers]) for r in range(workers)]
    return {"source": f"CPython {sys.version.split()[0]} standard library docstrings (PSF licence)",
            "train_modules": len(train), "heldout_modules": len(held), "train_rows": len(rows),
            "train_bytes": sum(len(t.encode()) for _, t in train),
            "heldout_bytes": sum(len(t.encode()) for _, t in held), "least_rank_bytes": min(shares)}


def check_no_repeat(corpus: dict, steps: int) -> None:
    need = steps * PROTOCOL["batch_size"] * PROTOCOL["seq_len"]
    if need > corpus["least_rank_bytes"]:
        raise SystemExit(f"{steps} steps read {need:,} tokens per worker but a worker's share of the text is "
                         f"{corpus['least_rank_bytes']:,}: the protocol never reads text twice; run fewer steps")


def run(label: str, overrides: list[str], workers: int, folder: Path, device: str, size: str,
        elastic: bool = False) -> dict:
    """One real run of the shipped config on `workers` local ranks; result.json plus wall time."""
    config = REPO / "recipes" / "configs" / PROTOCOL["model"] / f"{size}.yaml"
    out = folder / label
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "HF_TOKEN")}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", WANDB_MODE="disabled", HF_DATASETS_OFFLINE="1",
               HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p))
    data = ["data.source=c4", "data.tokenizer=bytes", f"data.path={folder / 'corpus'}",
            f"data.batch_size={PROTOCOL['batch_size']}", f"data.seq_len={PROTOCOL['seq_len']}"]
    quiet = ["logging.wandb=false", "checkpoint.every=0", "checkpoint.resume=false", "logging.log_every=100",
             f"logging.eval_every={PROTOCOL['eval_every']}", f"logging.eval_batches={PROTOCOL['eval_batches']}"]
    devices = ["device=cpu"]
    if device == "cuda":  # NCCL takes one GPU per rank; ranks sharing a GPU exchange through gloo
        import torch

        devices = ["device=cuda", f"dist.backend={'nccl' if torch.cuda.device_count() >= workers else 'gloo'}"]
    if elastic:  # as the local cluster runs DiLoCo: per-outer-step quorums in a private FileStore
        from recipes.private_store import ELASTIC_STORE_ENV

        env.update({ELASTIC_STORE_ENV: str(Path(tempfile.mkdtemp(prefix="geotrain-elastic-")) / "store"),
                    "GEOTRAIN_ELASTIC_GEN": "0"})
    start = time.perf_counter()
    proc = run_ranks(["--config", str(config), *data, *quiet, *devices, *overrides, f"out_dir={out}"],
                     workers, env, REPO)
    if proc.returncode != 0:
        from recipes.bench.presets import worker_error

        raise SystemExit(f"{label} failed: {worker_error(proc.stderr)}")
    result = json.loads((out / "result.json").read_text())
    curve = [dict(p) for p in result["eval_curve"]]
    if curve and curve[-1]["step"] == result["step"] and "eval_loss" in result:  # the finished model
        curve[-1].update(eval_loss=result["eval_loss"], bytes_sent=result["bytes_sent"])
    if not curve:  # no evaluation asked for (the bytes runs)
        curve = [{"step": result["step"], "eval_loss": result.get("eval_loss", float("nan")),
                  "bytes_sent": result["bytes_sent"]}]
    wall = round(time.perf_counter() - start, 1)
    print(f"{label}: loss {curve[-1]['eval_loss']:.4f} at step {curve[-1]['step']}, "
          f"{curve[-1]['bytes_sent']:,} bytes/worker, {wall} s", flush=True)
    return {"loss": curve[-1]["eval_loss"], "bytes_per_worker": curve[-1]["bytes_sent"], "curve": curve,
            "wall_s": wall}


def tune(args) -> dict:
    """DDP's sweep on the tuning seed: the best (lr, warmup) by held-out loss at N steps."""
    n, seed = PROTOCOL["ddp_steps"], PROTOCOL["tuning_seeds"][0]
    from recipes.config import safe_yaml

    shipped = safe_yaml((REPO / "recipes" / "configs" / PROTOCOL["model"] / f"{args.size}.yaml").read_text())
    runs = {}
    with tempfile.TemporaryDirectory(prefix="geotrain-protocol-") as tmp:
        corpus = write_corpus(Path(tmp) / "corpus", args.workers)
        check_no_repeat(corpus, n)

        def one(lr: float, warmup: int) -> None:
            label = f"ddp-lr{lr:g}-w{warmup}"
            runs[label] = {"lr": lr, "warmup": warmup, **run(
                label, ["gradient_compression=none", f"seed={seed}", f"steps={n}", f"optim.lr={lr}",
                        f"optim.warmup_steps={warmup}"], args.workers, Path(tmp), args.device, args.size)}

        for factor in TUNE_LR_FACTORS:
            one(round(factor * shipped["optim"]["lr"], 8), shipped["optim"]["warmup_steps"])
        best = min(runs.values(), key=lambda r: r["loss"])
        one(best["lr"], LONG_WARMUP)
    best = min(runs.values(), key=lambda r: r["loss"])
    return {"protocol": PROTOCOL, "kind": "tune", "workers": args.workers, "seed": seed, "corpus": corpus,
            "runs": runs, "best": {"lr": best["lr"], "warmup": best["warmup"], "loss": best["loss"]}}


def score(args) -> dict:
    """On the scoring seeds: the tuned DDP over N steps, each preset over its factor x N (across
    `--datacenters K` when given: the presets' hierarchical exchange; DDP stays flat)."""
    n = PROTOCOL["ddp_steps"]
    where = [f"datacenters={args.datacenters}"] if args.datacenters > 1 else []
    tuned = json.loads(args.ddp_from.read_text())["best"] if args.ddp_from else {"lr": None, "warmup": None}
    if args.reuse_ddp:
        before = json.loads(args.reuse_ddp.read_text())
        if before["protocol"] != json.loads(json.dumps(PROTOCOL)) or before["ddp"] != tuned or before["size"] != args.size \
                or before["workers"] != args.workers:
            raise SystemExit(f"--reuse-ddp {args.reuse_ddp}: another protocol, size or DDP tuning; run DDP here")
    ddp_opts = [f"optim.lr={tuned['lr']}", f"optim.warmup_steps={tuned['warmup']}"] if tuned["lr"] else []
    presets = [t for t in PROTOCOL["targets"] if not args.presets or t[0] in args.presets]
    seeds = args.seeds or PROTOCOL["score_seeds"]
    if set(seeds) & set(PROTOCOL["tuning_seeds"] + [1, 2, 3]):
        raise SystemExit(f"--seeds {seeds}: seeds 0-3 tune; scores come from other seeds (e.g. 100 101 102)")
    per_seed = []
    with tempfile.TemporaryDirectory(prefix="geotrain-protocol-") as tmp:
        corpus = write_corpus(Path(tmp) / "corpus", args.workers)
        check_no_repeat(corpus, max(round(f * n) for _, f, _ in presets) if presets else n)
        earlier = {r["seed"]: r["methods"]["ddp"] for r in json.loads(args.reuse_ddp.read_text())["runs"]
                   } if args.reuse_ddp else {}
        for seed in seeds:
            ddp = earlier.get(seed) or run(f"s{seed}-ddp", ["gradient_compression=none", f"seed={seed}", f"steps={n}", *ddp_opts],
                      args.workers, Path(tmp), args.device, args.size)
            methods = {"ddp": ddp}
            for name, factor, _ in presets:
                steps = round(factor * n)
                methods[name] = run(f"s{seed}-{name}", [f"gradient_compression={name}", f"seed={seed}",
                                                        f"steps={steps}", *where], args.workers, Path(tmp), args.device,
                                    args.size, elastic=args.elastic)
            per_seed.append({"seed": seed, "methods": methods})
    return {"protocol": PROTOCOL, "kind": "score", "workers": args.workers, "datacenters": args.datacenters,
            "elastic": args.elastic,
            "device": args.device,
            "size": args.size, "ddp": tuned, "corpus": corpus, "seeds": seeds, "runs": per_seed,
            "summary": summarise(per_seed, presets, n)}


def bytes_growth(args) -> dict:
    """Bytes per worker per outer step at 2 and at 4 workers, each preset (counted by the wire). Only
    the bytes are measured here, so H is shortened to 4 (a payload does not depend on H)."""
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="geotrain-protocol-") as tmp:
        write_corpus(Path(tmp) / "corpus", 4)
        for name in args.presets or ("none", "low", "medium", "high", "ultra"):
            short = [] if name == "none" else ["diloco.inner_steps=4"]
            sent = {w: run(f"{name}-w{w}", [f"gradient_compression={name}", "seed=0", "steps=8",
                                            "logging.eval_every=0", *short], w, Path(tmp), args.device,
                           args.size)["bytes_per_worker"] for w in (2, 4)}
            out[name] = {"bytes_2": sent[2], "bytes_4": sent[4], "growth": sent[4] / max(1, sent[2])}
            print(f"{name}: {sent[2]:,} -> {sent[4]:,} bytes/worker over 8 steps ({out[name]['growth']:.3f}x)",
                  flush=True)
    return {"protocol": PROTOCOL, "kind": "bytes", "size": args.size, "presets": out}


def summarise(per_seed: list[dict], presets: list[tuple], n: int) -> dict:
    """Per preset: worst and mean end loss against each seed's DDP, bytes ratio, the token factor at
    which its curve first reaches DDP's loss, and whether issue 39's target holds on every seed."""
    ddp_losses = [r["methods"]["ddp"]["loss"] for r in per_seed]
    out = {"ddp": {"loss_mean": sum(ddp_losses) / len(ddp_losses), "loss_spread": max(ddp_losses) - min(ddp_losses),
                   "bytes_per_worker": per_seed[0]["methods"]["ddp"]["bytes_per_worker"]}}
    for name, factor, ratio in presets:
        rows = []
        for r in per_seed:
            ddp, m = r["methods"]["ddp"], r["methods"][name]
            step, sent = reach(m["curve"], ddp["loss"])
            rows.append({"loss_vs_ddp": m["loss"] / ddp["loss"], "bytes_ratio": ddp["bytes_per_worker"] / max(
                1, m["bytes_per_worker"]), "reach_factor": None if step is None else step / n,
                "reach_bytes_ratio": None if step is None else ddp["bytes_per_worker"] / max(1, sent)})
        reached = [x["reach_factor"] for x in rows]
        out[name] = {"factor": factor, "target_ratio": ratio,
                     "loss_vs_ddp_worst": max(x["loss_vs_ddp"] for x in rows),
                     "loss_vs_ddp_mean": sum(x["loss_vs_ddp"] for x in rows) / len(rows),
                     "bytes_ratio": min(x["bytes_ratio"] for x in rows),
                     "reach_factor_worst": None if None in reached else max(reached),
                     "held": all(x["loss_vs_ddp"] <= 1.0 and x["bytes_ratio"] >= ratio for x in rows)}
    return out


def print_summary(report: dict) -> None:
    s, p = report["summary"], report["protocol"]
    print(f"protocol v{p['version']}: gpt-neo {report['size']}, {report['workers']} workers, N={p['ddp_steps']} "
          f"steps, seeds {report['seeds']}; DDP (lr {report['ddp']['lr']}, warmup {report['ddp']['warmup']}) "
          f"held-out loss {s['ddp']['loss_mean']:.4f} (seed spread {s['ddp']['loss_spread']:.4f})")
    print(f"{'preset':<8}{'steps':>8}{'x fewer bytes':>15}{'loss/DDP worst':>16}{'mean':>8}"
          f"{'reaches DDP at':>16}{'target':>22}")
    for name, *_ in p["targets"]:
        if name not in s:
            continue
        m = s[name]
        reach_at = "never" if m["reach_factor_worst"] is None else f"{m['reach_factor_worst']:.2f} N"
        target = f"{m['factor']}N, {m['target_ratio']}x: {'held' if m['held'] else 'missed'}"
        print(f"{name:<8}{m['factor']:>7}N{m['bytes_ratio']:>14.0f}x{m['loss_vs_ddp_worst']:>16.4f}"
              f"{m['loss_vs_ddp_mean']:>8.4f}{reach_at:>16}{target:>22}")


def markdown(report: dict) -> str:
    """A score report as the tables recipes/bench/RESULTS.md carries: per seed, then held-out loss
    against tokens read per worker (the iso-token curves, every fifth evaluation and the last)."""
    names = list(report["runs"][0]["methods"])
    lines = ["| seed | " + " | ".join(f"{n} loss (bytes/worker)" for n in names) + " |",
             "|---" * (len(names) + 1) + "|"]
    for r in report["runs"]:
        lines.append(f"| {r['seed']} | " + " | ".join(
            f"{m['loss']:.4f} ({m['bytes_per_worker']:,})" for m in r["methods"].values()) + " |")
    tokens = PROTOCOL["batch_size"] * PROTOCOL["seq_len"]
    steps = sorted({p["step"] for r in report["runs"] for m in r["methods"].values() for p in m["curve"]})
    shown = [s for i, s in enumerate(steps) if (i + 1) % 5 == 0 or s == steps[-1]]
    lines += ["", "| tokens/worker (step) | " + " | ".join(f"{n} (mean of seeds)" for n in names) + " |",
              "|---" * (len(names) + 1) + "|"]
    for step in shown:
        cells = []
        for n in names:
            at = [p["eval_loss"] for r in report["runs"] for p in r["methods"][n]["curve"] if p["step"] == step]
            cells.append(f"{sum(at) / len(at):.4f}" if len(at) == len(report["runs"]) else "")
        lines.append(f"| {step * tokens:,} ({step}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipes.bench.protocol", description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("tune", "score", "bytes", "markdown"))
    parser.add_argument("report", nargs="?", type=Path, help="markdown: the score report to print as tables")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seeds", type=int, nargs="+", help="scoring seeds (default 100 101 102)")
    parser.add_argument("--presets", nargs="+", help="a subset of the presets to score")
    parser.add_argument("--ddp-from", type=Path, help="the tune report whose best DDP is the baseline")
    parser.add_argument("--datacenters", type=int, default=1, help="score: the presets across K datacenters")
    parser.add_argument("--elastic", action="store_true", help="score: the presets in elastic mode (how the local "
                                                                 "cluster runs DiLoCo: a quorum per outer step)")
    parser.add_argument("--reuse-ddp", type=Path, help="score: DDP's runs of these seeds from an earlier score "
                                                       "report of the same protocol and tuned DDP")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--size", default=PROTOCOL["size"], help="gpt-neo size (a GPU run: >= 20M parameters)")
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args(argv)
    if args.kind == "markdown":
        print(markdown(json.loads(args.report.read_text())))
        return 0
    report = {"tune": tune, "score": score, "bytes": bytes_growth}[args.kind](args)
    if args.kind == "score":
        print_summary(report)
    elif args.kind == "tune":
        print(f"DDP's best: lr {report['best']['lr']}, warmup {report['best']['warmup']}, "
              f"loss {report['best']['loss']:.4f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
