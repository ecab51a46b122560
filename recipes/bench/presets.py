"""Benchmark: bytes on the wire vs. loss for DDP and every preset, same compute budget.

    python -m recipes.bench --quick --json bench.json
    python -m recipes.bench --methods ddp high ultra --steps 3000
    python -m recipes.bench --task text --quick --seeds 2 --json text.json   (recipes/bench/text.py)

Each method is a real 2-worker run of tiny GPT-Neo on the Markov data (every
worker does the same number of inner steps on the same batch size); the held-out
loss of the final synchronised weights is compared with the chain's exact entropy
floor. Also times a bare AdamW step against a DiLoCo inner step on one process.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from recipes.bench.local_group import run_ranks

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "recipes" / "configs" / "gpt-neo" / "tiny.yaml"
# method name -> overrides on top of the shared settings
METHODS: dict[str, list[str]] = {
    "ddp": ["gradient_compression=none"],
    "low": ["gradient_compression=low"],
    "medium": ["gradient_compression=medium"],
    "high": ["gradient_compression=high"],
    "ultra": ["gradient_compression=ultra"],
    "high-overlap": ["gradient_compression=high", "diloco.overlap=true"],
    "high-momentum-0.9": ["gradient_compression=high", "diloco.outer_momentum=0.9"],
    "ultra-demo": ["gradient_compression=ultra", "algorithm=demo", "diloco.bits=8", "diloco.block=128",
                   "demo.chunk=64", "demo.topk=4"],
}
QUICK_METHODS = ["ddp", "low", "medium", "high", "ultra"]
SHARED = ["device=cpu", "data.source=markov", "data.markov_order=1", "data.markov_vocab=64",
          "data.markov_alpha=0.1", "data.batch_size=8", "data.seq_len=64", "optim.lr=0.003", "optim.warmup_steps=50",
          "logging.wandb=false", "checkpoint.every=0", "checkpoint.resume=false", "logging.log_every=100"]


def run_method(name: str, steps: int, eval_batches: int, workdir: Path, nproc: int = 2) -> dict:
    """One real torchrun; returns bytes, held-out loss and wall time."""
    result = torchrun(name, [*SHARED, *METHODS[name], f"steps={steps}", f"logging.eval_batches={eval_batches}"],
                      workdir, nproc)
    return {"bytes_per_rank": result["bytes_sent"], "loss": result["eval_loss"],
            "excess_loss": result["excess_loss"], "entropy_floor": result["entropy_floor"],
            "outer_steps": result["outer_step"], "wall_s": result["wall_s"]}


def torchrun(name: str, overrides: list[str], workdir: Path, nproc: int = 2) -> dict:
    """One real run of the tiny config on `nproc` ranks with `overrides` (started as a local
    workspace starts them: recipes.bench.local_group); its result.json plus wall time. Each run
    meets in a store of its own, so runs started at once never meet."""
    out = workdir / name
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "HF_TOKEN")}
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=path, WANDB_MODE="disabled",
               HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    start = time.perf_counter()
    proc = run_ranks(["--config", str(CONFIG), *overrides, f"out_dir={out}"], nproc, env, REPO)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed: {worker_error(proc.stderr)}\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return {**json.loads((out / "result.json").read_text()), "wall_s": round(wall, 2)}


def worker_error(stderr: str) -> str:
    """What a worker said went wrong, from the ranks' stderr (torchrun's, when a run went through
    it, ends with the launcher's own summary): the exception line of the rank torchrun names as the root cause ("[rank1]:
    ValueError: ..."), else any rank's, else a one-line error ("config error: ..."), else the last line."""
    launcher = re.compile(r"^[WEI]\d{4} |^\*+$|^Setting OMP_NUM_THREADS")
    root = re.search(r"Root Cause \(first observed failure\):.*?\brank\s*:\s*(\d+)", stderr, re.DOTALL)
    raw = [line.strip() for line in stderr.splitlines() if line.strip()]

    def exception(line: str) -> bool:
        name = line.split(":", 1)[0].rsplit(".", 1)[-1]
        return ":" in line and bool(re.fullmatch(r"\w+(Error|Exception|Exit)", name)) and name != "ChildFailedError"

    if root:
        prefix = f"[rank{root.group(1)}]: "
        for line in raw:
            if line.startswith(prefix) and exception(line[len(prefix):]):
                return line[len(prefix):]
    lines = [line.split("]: ", 1)[1] if re.match(r"\[rank\d+\]: ", line) else line for line in raw]
    for line in lines:
        if exception(line):
            return line
    for line in lines:
        if not launcher.search(line) and re.search(r"\berror\b", line, re.IGNORECASE):
            return line
    return lines[-1] if lines else "no output"


def inner_step_overhead(steps: int = 150) -> dict:
    """Time a bare AdamW step and a DiLoCo inner step (AdamW + outer bookkeeping) on the same model."""
    import torch

    from recipes.algorithms import build_algorithm
    from recipes.config import parse_config, resolve_compression
    from recipes.distributed import Wire
    from recipes.models import build_model

    torch.set_num_threads(1)
    cfg = parse_config({"model": "gpt-neo", "size": "tiny", "steps": steps, "out_dir": "unused",
                        "gradient_compression": "high"})
    model, loss_fn = build_model("gpt-neo", "tiny")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    algo = build_algorithm(model, resolve_compression(cfg), cfg, Wire(1))
    algo.inner_steps = 10 ** 9  # time inner steps only; the outer step is network time, measured above
    batch = {"input_ids": torch.randint(0, 64, (8, 64))}

    def one(with_diloco: bool, step: int) -> float:
        t = time.perf_counter()
        loss, _ = loss_fn(model, batch)
        loss.backward()
        algo.after_backward() if with_diloco else None
        opt.step()
        opt.zero_grad(set_to_none=True)
        algo.after_optimizer_step(step) if with_diloco else None
        return time.perf_counter() - t

    bare, diloco = [], []
    for step in range(1, steps + 1):  # interleaved so that machine noise hits both alike
        bare.append(one(False, step))
        diloco.append(one(True, step))
    bare_ms = 1000 * sorted(bare)[len(bare) // 2]
    diloco_ms = 1000 * sorted(diloco)[len(diloco) // 2]
    return {"adamw_step_ms": round(bare_ms, 3), "diloco_inner_step_ms": round(diloco_ms, 3),
            "overhead_pct": round(100 * (diloco_ms / bare_ms - 1), 2)}


def print_table(report: dict) -> None:
    print(f"entropy floor {report['entropy_floor']:.4f} nats/token; {report['steps']} steps x 2 workers")
    print(f"{'method':<14}{'bytes/rank':>14}{'vs DDP':>10}{'loss':>9}{'excess':>9}{'excess/DDP':>12}{'wall s':>8}")
    for name, m in report["methods"].items():
        print(f"{name:<14}{m['bytes_per_rank']:>14,}{m['bytes_vs_ddp']:>9.1f}x{m['loss']:>9.4f}"
              f"{m['excess_loss']:>9.4f}{m['excess_vs_ddp']:>12.3f}{m['wall_s']:>8.1f}")
    o = report["inner_step"]
    print(f"inner step: AdamW {o['adamw_step_ms']} ms, DiLoCo {o['diloco_inner_step_ms']} ms "
          f"({o['overhead_pct']:+.2f}%)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--wan" in argv:  # across emulated datacenters (root): recipes/bench/wan.py
        from recipes.bench.wan import main as wan_main

        return wan_main([a for a in argv if a != "--wan"])
    parser = argparse.ArgumentParser(prog="python -m recipes.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the CI size: presets only, < 5 min on 2 cores")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--methods", nargs="*", help=f"subset of {', '.join(METHODS)}")
    parser.add_argument("--steps", type=int, help="inner steps per worker (markov: 1500 quick, 3000 full; "
                                                  f"text: {TEXT_QUICK_STEPS} quick, {TEXT_STEPS} full)")
    parser.add_argument("--task", choices=("markov", "text"), default="markov",
                        help="markov: the CI default; text: reach DDP's held-out loss on natural text")
    parser.add_argument("--seeds", type=int, default=1, help="text task: seeds 0..N-1 (figures: the worst)")
    parser.add_argument("--first-seed", type=int, default=0, help="text task: start the seeds here (one seed per run)")
    parser.add_argument("--merge", type=Path, nargs="+", metavar="REPORT",
                        help="text task: combine reports of the same settings on different seeds, run nothing")
    parser.add_argument("--shards", choices=("passages", "topics"), default="passages",
                        help="text task: passages: every worker a random half of every topic (like c4's "
                             "rows); topics: each worker its own half of the topics")
    parser.add_argument("--eval-every", type=int, default=50, help="text task: held-out evaluation interval")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="METHOD:KEY=VALUE",
                        help="text task: extra override for one method (tuning), e.g. high:diloco.inner_steps=50; "
                             "all:KEY=VALUE for every method, DDP included")
    parser.add_argument("--ddp-from", type=Path, help="text task: reuse DDP's curves from this earlier report "
                                                       "(same steps and settings) instead of running DDP again")
    parser.add_argument("--budgets", type=float, nargs="+", default=[], metavar="F",
                        help="text task: also run each method scheduled over F x the steps (e.g. 1.2 1.5); "
                             "budget_reach is the smallest F that ends at DDP's loss")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="text task: where workers compute (cuda: the 2 workers may share one GPU, over gloo)")
    parser.add_argument("--parallel", type=int, default=1, metavar="K",
                        help="text task: K torchruns at once (each 2 workers; K <= cores / 2)")
    args = parser.parse_args(argv)
    if args.task == "text":
        return text_main(args)
    text_only = [flag for flag, dest in TEXT_ONLY.items() if getattr(args, dest) != parser.get_default(dest)]
    if text_only:  # the Markov bench would ignore them and run for minutes
        raise SystemExit(f"{', '.join(text_only)}: only for the text task; add --task text")
    methods = args.methods or (QUICK_METHODS if args.quick else list(METHODS))
    unknown = [m for m in methods if m not in METHODS]
    if unknown:  # before minutes of DDP, not after
        raise SystemExit(f"--methods {', '.join(unknown)}: not a Markov bench method; choose from {', '.join(METHODS)}")
    if "ddp" not in methods:
        methods = ["ddp", *methods]
    steps = args.steps or (1500 if args.quick else 3000)
    eval_batches = 64
    report: dict = {"steps": steps, "workers": 2, "methods": {}}
    with tempfile.TemporaryDirectory(prefix="geotrain-bench-") as tmp:
        for name in methods:
            report["methods"][name] = run_method(name, steps, eval_batches, Path(tmp))
            m = report["methods"][name]
            print(f"{name}: {m['bytes_per_rank']:,} bytes, loss {m['loss']:.4f}, {m['wall_s']} s", flush=True)
    ddp = report["methods"]["ddp"]
    report["entropy_floor"] = ddp["entropy_floor"]
    for m in report["methods"].values():
        m["bytes_vs_ddp"] = ddp["bytes_per_rank"] / max(1, m["bytes_per_rank"])
        m["excess_vs_ddp"] = m["excess_loss"] / ddp["excess_loss"]
    report["methods"]["none"] = {**ddp, "same_as": "ddp"}  # the `none` preset is DDP
    report["inner_step"] = inner_step_overhead()
    print_table(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


TEXT_QUICK_STEPS, TEXT_STEPS = 400, 1500
# options the Markov bench would ignore (flag -> argparse dest), refused without --task text
TEXT_ONLY = {"--seeds": "seeds", "--first-seed": "first_seed", "--merge": "merge", "--shards": "shards",
             "--eval-every": "eval_every", "--set": "sets", "--ddp-from": "ddp_from", "--budgets": "budgets",
             "--device": "device", "--parallel": "parallel"}


# the builds a report records: DDP's loss moves with them (transformers builds the model, datasets streams and
# splits the text; seed 0's DDP ended at 1.7264 in one stop's install and at 1.7376 in the next's, torch 2.13 in both)
BUILDS = ("torch", "transformers", "datasets")


def build_versions() -> dict[str, str]:
    """The installed versions of those packages, without importing them."""
    from importlib.metadata import version

    return {name: version(name) for name in BUILDS}


def build_differs(earlier: dict, now: dict) -> str | None:
    """How report `earlier` was built otherwise than `now` (a report from before transformers and
    datasets were recorded counts as different: its model or data may have been otherwise); None when alike."""
    said = [f"{name} {earlier.get(name, '(not recorded)')} against {now[name]}" for name in BUILDS
            if earlier.get(name, now[name] if name == "torch" else None) != now[name]]
    return ", ".join(said) or None


def text_main(args) -> int:
    from recipes.bench.text import TEXT_SHARED, merge_reports, print_text_table, run_text, settings_differ

    if args.merge:
        report = merge_reports([json.loads(f.read_text()) for f in args.merge])
        print_text_table(report)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
        return 0

    methods = args.methods or (QUICK_METHODS if args.quick else list(METHODS))
    methods = list(dict.fromkeys(["ddp", *methods]))  # each once: two identical runs would share a folder
    if args.parallel < 1:
        raise SystemExit(f"--parallel {args.parallel}: give 1 or more (each run is 2 workers; at most cores / 2)")
    cores = os.cpu_count() or 1
    if 2 * args.parallel > cores:
        print(f"note: --parallel {args.parallel} puts {2 * args.parallel} workers on {cores} cores; each run "
              f"will be slower than alone (wall times are not comparable across --parallel)", file=sys.stderr)
    overrides = {name: list(METHODS.get(name, [])) for name in methods}
    for item in args.sets:
        name, _, setting = item.partition(":")
        if (name != "all" and name not in overrides) or "=" not in setting:
            raise SystemExit(f"--set {item!r}: write METHOD:KEY=VALUE with METHOD one of {', '.join(methods)}, "
                             "or all (every method, DDP included)")
        for each in (methods if name == "all" else [name]):
            overrides[each].append(setting)
    unknown = [m for m in methods if m not in METHODS and not any(o.startswith("gradient_compression=")
                                                                 for o in overrides[m])]
    if unknown:
        raise SystemExit(f"unknown method(s) {', '.join(unknown)}: name one of {', '.join(METHODS)} "
                         "or give it gradient_compression with --set")
    steps = args.steps or (TEXT_QUICK_STEPS if args.quick else TEXT_STEPS)
    ddp_curves = None
    if args.ddp_from:
        earlier = json.loads(args.ddp_from.read_text())
        if earlier.get("ddp_steps") != steps or earlier.get("eval_every") != args.eval_every \
                or earlier.get("corpus", {}).get("shards", "topics") != args.shards:
            raise SystemExit(f"--ddp-from {args.ddp_from}: its steps/eval interval differ from this run's")
        builds = build_differs(earlier, build_versions())
        if earlier.get("device", "cpu") != args.device or builds:
            raise SystemExit(f"--ddp-from {args.ddp_from}: its DDP ran on {earlier.get('device', 'cpu')}, this run "
                             f"on {args.device}{f' ({builds})' if builds else ''}: run DDP again here")
        differ = settings_differ(earlier, {"shared": TEXT_SHARED, "sets": {"ddp": overrides["ddp"]}}, ["ddp"])
        if differ:
            raise SystemExit(f"--ddp-from {args.ddp_from}: its DDP ran with other settings than this run's ({differ}): "
                             "run DDP again here (leave out --ddp-from)")
        ddp_curves = {r["seed"]: r["methods"]["ddp"]["curve"] for r in earlier["runs"]}
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    device = ["device=cuda", "dist.backend=gloo"] if args.device == "cuda" else ["device=cpu"]
    try:
        report = run_text(methods, steps, seeds, args.eval_every, 16,
                          lambda name, o, workdir: torchrun(name, [*device, *o], workdir), overrides, ddp_curves,
                          args.shards, tuple(args.budgets), args.parallel)
    except (ValueError, RuntimeError) as err:  # a bad factor, or a run that failed (its output included)
        raise SystemExit(str(err)) from None
    report.update(device=args.device, **build_versions())
    if ddp_curves:
        report["ddp_from"] = str(args.ddp_from)
    report["methods"]["none"] = {**report["methods"]["ddp"], "same_as": "ddp"}
    print_text_table(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
