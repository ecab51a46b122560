"""Load and resolve recipe configs (checked by `recipes.schema`); also a small CLI.

    python -m recipes.config check FILE [--json]     exit 0 valid, 2 invalid
    python -m recipes.config catalog --json          models, sizes and presets

No torch import here. The app checks configs in-process through `recipes.schema`;
this CLI is a thin wrapper over the same models for scripts and docs.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from recipes.catalog import catalog
from recipes.schema import ConfigError, TrainConfig, check
from recipes.schema import yaml_limits
from recipes.schema.models import PRESETS_PATH

CONFIGS_DIR = Path(__file__).with_name("configs")


@dataclass(kw_only=True, frozen=True)
class Compression:
    """A preset after config overrides: what the training loop actually does."""

    preset: str
    algorithm: Literal["ddp", "diloco", "demo"]
    inner_steps: int
    bits: int
    block: int
    chunk: int = 64
    topk: int = 4
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    overlap_momentum: float = 0.9  # the outer momentum with diloco.overlap (eager updates)
    fragments: int = 1
    error_feedback: bool = True
    rotate: bool = False
    density: float = 1.0


def safe_yaml(text: str) -> Any:
    """YAML within recipes.schema.yaml_limits (size, depth, aliases); refusals as YAMLError."""
    try:
        return yaml_limits.load(text)
    except yaml_limits.YamlRefused as exc:
        where = f" at line {exc.line}" if exc.line else ""
        raise yaml.YAMLError(f"{exc.problem}{where}") from None


def load_presets(path: Path = PRESETS_PATH) -> dict[str, dict]:
    """The preset table as plain data."""
    return safe_yaml(path.read_text())


def parse_config(data: Any, overrides: list[str] = ()) -> TrainConfig:
    """Plain data (+ `a.b=value` overrides) -> a checked TrainConfig, or ConfigError."""
    errors = []
    data = dict(data) if isinstance(data, dict) else data
    if overrides and not isinstance(data, dict):
        raise ConfigError([{"path": "(root)", "expected": "a mapping", "found": type(data).__name__,
                            "message": "the config must be a mapping before overrides apply"}])
    for item in overrides:
        if "=" not in item:
            errors.append({"path": item, "expected": "key=value", "found": repr(item),
                           "message": f"override {item!r} is not of the form key=value"})
            continue
        key, raw = item.split("=", 1)
        try:
            value = safe_yaml(raw) if raw else ""
        except yaml.YAMLError as exc:
            errors.append({"path": key.strip(), "expected": "a YAML value", "found": repr(raw[:40]),
                           "message": f"override {key.strip()!r}: {exc}"})
            continue
        _set_dotted(data, key.strip(), value)
    cfg, problems = check(data)
    if errors or problems:
        raise ConfigError(errors + problems)
    return cfg


def _set_dotted(data: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        node[part] = dict(child) if isinstance(child, dict) else {}
        node = node[part]
    node[parts[-1]] = value


def load_config(path: str | Path, overrides: list[str] = ()) -> TrainConfig:
    """Read a YAML config file ("-": standard input); raises ConfigError with every problem found."""
    try:
        data = safe_yaml(sys.stdin.read() if str(path) == "-" else Path(path).read_text())
    except yaml.YAMLError as exc:
        raise ConfigError([{"path": "(file)", "expected": "valid YAML", "found": str(path),
                            "message": f"not valid YAML: {exc}"}]) from exc
    except OSError as exc:
        raise ConfigError([{"path": "(file)", "expected": "a readable file", "found": str(path),
                            "message": f"cannot read {path}: {exc.strerror}"}]) from exc
    return parse_config(data if data is not None else {}, overrides)


PRESET_BETA1 = 0.9  # the inner Adam beta1 a preset's plain outer_lr and inner_steps were tuned at (every model config's default)


def preset_by_beta1(preset: dict, key: str, beta1: float, default):
    """The preset's `key` (outer_lr, inner_steps) for a run whose inner Adam beta1 is `beta1`: the plain
    `key` was measured best at PRESET_BETA1 and `<key>_by_beta1` (beta1 -> value) at others; the nearest
    beta1 wins, a tie the plain value, then the higher beta1. (On the text bench `low`'s best outer lr at
    beta1 0.5, 0.7, is unstable at 0.9, and `medium` wants H=8 at 0.5 but 12 at 0.9.)"""
    table = {PRESET_BETA1: preset.get(key, default)}
    table.update({float(b): value for b, value in (preset.get(f"{key}_by_beta1") or {}).items()})
    return table[min(table, key=lambda b: (round(abs(b - beta1), 9), b != PRESET_BETA1, -b))]


def preset_outer_lr(preset: dict, beta1: float) -> float:
    """The preset's outer lr at inner Adam beta1 `beta1` (preset_by_beta1)."""
    return float(preset_by_beta1(preset, "outer_lr", beta1, Compression.outer_lr))


def resolve_compression(cfg: TrainConfig, presets: dict | None = None) -> Compression:
    """The preset named by the config, with the config's explicit overrides applied."""
    preset = (presets or load_presets())[cfg.gradient_compression]
    beta1 = cfg.optim.betas[0] if cfg.optim.name == "adamw" else PRESET_BETA1  # tuned with AdamW only
    return Compression(
        preset=cfg.gradient_compression,
        algorithm=cfg.algorithm or preset["algorithm"],
        inner_steps=cfg.diloco.inner_steps or int(preset_by_beta1(preset, "inner_steps", beta1, 1)),
        bits=cfg.diloco.bits or preset["bits"],
        block=cfg.diloco.block if cfg.diloco.block is not None else preset.get("block", 0),
        chunk=cfg.demo.chunk or preset.get("chunk", 64),
        topk=cfg.demo.topk or preset.get("topk", 4),
        outer_lr=cfg.diloco.outer_lr if cfg.diloco.outer_lr is not None else preset_outer_lr(preset, beta1),
        outer_momentum=(cfg.diloco.outer_momentum if cfg.diloco.outer_momentum is not None
                        else preset.get("outer_momentum", 0.9)),
        overlap_momentum=(cfg.diloco.outer_momentum if cfg.diloco.outer_momentum is not None
                          else preset.get("overlap_momentum", preset.get("outer_momentum", 0.9))),
        fragments=cfg.diloco.fragments or preset.get("fragments", 1),
        error_feedback=(cfg.diloco.error_feedback if cfg.diloco.error_feedback is not None
                        else bool(preset.get("error_feedback", True))),
        rotate=cfg.diloco.rotate if cfg.diloco.rotate is not None else bool(preset.get("rotate", False)),
        density=cfg.diloco.density if cfg.diloco.density is not None else float(preset.get("density", 1.0)),
    )


def config_to_dict(cfg: TrainConfig) -> dict:
    """The config as plain data (saved in checkpoints and sent to W&B)."""
    return cfg.model_dump()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipes.config", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="validate a config file")
    check.add_argument("file", help="the config file, or - to read it from standard input")
    check.add_argument("overrides", nargs="*", help="key=value overrides")
    check.add_argument("--json", action="store_true")
    cat = sub.add_parser("catalog", help="models, sizes and presets")
    cat.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "catalog":
        presets = load_presets()
        if args.json:
            print(json.dumps({"models": catalog(), "presets": list(presets)}))
        else:
            for model, sizes in catalog().items():
                print(f"{model}: {', '.join(sizes)}")
            for name, p in presets.items():
                print(f"preset {name}: {p['description']}")
        return 0
    try:
        load_config(args.file, args.overrides)
    except ConfigError as exc:
        if args.json:
            print(json.dumps(exc.errors))
        else:
            for e in exc.errors:
                print(f"{args.file}: {e['path']}: {e['message']}")
        return 2
    print("[]" if args.json else f"{args.file}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
