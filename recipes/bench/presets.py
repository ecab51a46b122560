"""Benchmark: bytes on the wire vs. loss for DDP and every preset, same compute budget.

    python -m recipes.bench --quick --json bench.json
    python -m recipes.bench --methods ddp high ultra --steps 3000
    python -m recipes.bench --task text --quick --seeds 2 --json text.json   (recipes/bench/text.py)

Each method is a real 2-worker torchrun of tiny GPT-Neo on the Markov data (every
worker does the same number of inner steps on the same batch size); the held-out
loss of the final synchronised weights is compared with the chain's exact entropy
floor. Also times a bare AdamW step against a DiLoCo inner step on one process.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
    "ultra-demo": ["gradient_compression=ultra", "algorithm=demo", "diloco.bits=8", "demo.chunk=64", "demo.topk=4"],
}
QUICK_METHODS = ["ddp", "low", "medium", "high", "ultra"]
SHARED = ["data.source=markov", "data.markov_order=1", "data.markov_vocab=64", "data.markov_alpha=0.1",
          "data.batch_size=8", "data.seq_len=64", "optim.lr=0.003", "optim.warmup_steps=50",
          "logging.wandb=false", "checkpoint.every=0", "checkpoint.resume=false", "logging.log_every=100"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_method(name: str, steps: int, eval_batches: int, workdir: Path, nproc: int = 2) -> dict:
    """One real torchrun; returns bytes, held-out loss and wall time."""
    result = torchrun(name, [*SHARED, *METHODS[name], f"steps={steps}", f"logging.eval_batches={eval_batches}"],
                      workdir, nproc)
    return {"bytes_per_rank": result["bytes_sent"], "loss": result["eval_loss"],
            "excess_loss": result["excess_loss"], "entropy_floor": result["entropy_floor"],
            "outer_steps": result["outer_step"], "wall_s": result["wall_s"]}


def torchrun(name: str, overrides: list[str], workdir: Path, nproc: int = 2) -> dict:
    """One real torchrun of the tiny config with `overrides`; its result.json plus wall time."""
    out = workdir / name
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--rdzv-backend",
           "c10d", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", "-m", "recipes.train", "--config",
           str(CONFIG), *overrides, f"out_dir={out}"]
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "HF_TOKEN")}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), WANDB_MODE="disabled",
               HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return {**json.loads((out / "result.json").read_text()), "wall_s": round(wall, 2)}


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
                        help="text task: extra override for one method (tuning), e.g. high:diloco.inner_steps=50")
    parser.add_argument("--ddp-from", type=Path, help="text task: reuse DDP's curves from this earlier report "
                                                       "(same steps and settings) instead of running DDP again")
    args = parser.parse_args(argv)
    if args.task == "text":
        return text_main(args)
    methods = args.methods or (QUICK_METHODS if args.quick else list(METHODS))
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


def text_main(args) -> int:
    from recipes.bench.text import merge_reports, print_text_table, run_text

    if args.merge:
        report = merge_reports([json.loads(f.read_text()) for f in args.merge])
        print_text_table(report)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
        return 0

    methods = args.methods or (QUICK_METHODS if args.quick else list(METHODS))
    methods = ["ddp", *[m for m in methods if m != "ddp"]]
    overrides = {name: list(METHODS.get(name, [])) for name in methods}
    for item in args.sets:
        name, _, setting = item.partition(":")
        if name not in overrides or "=" not in setting:
            raise SystemExit(f"--set {item!r}: write METHOD:KEY=VALUE with METHOD one of {', '.join(methods)}")
        overrides[name].append(setting)
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
        ddp_curves = {r["seed"]: r["methods"]["ddp"]["curve"] for r in earlier["runs"]}
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    report = run_text(methods, steps, seeds, args.eval_every, 16,
                      lambda name, o, workdir: torchrun(name, o, workdir), overrides, ddp_curves, args.shards)
    if ddp_curves:
        report["ddp_from"] = str(args.ddp_from)
    report["methods"]["none"] = {**report["methods"]["ddp"], "same_as": "ddp"}
    print_text_table(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
