"""Load, check and resolve recipe configs; also a small CLI for the app.

    python -m recipes.config check FILE [--json]     exit 0 valid, 2 invalid
    python -m recipes.config catalog --json          models, sizes and presets

No torch import here: the app calls this while a user edits a config.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from recipes.catalog import MODEL_DATA, MODEL_SIZES, catalog
from recipes.config_schema import TrainConfig

PRESETS_PATH = Path(__file__).with_name("presets.yaml")
CONFIGS_DIR = Path(__file__).with_name("configs")
WIRE_BITS = (32, 16, 8, 4, 1)


class ConfigError(Exception):
    """A config that cannot run; `errors` holds one dict per problem."""

    def __init__(self, errors: list[dict]) -> None:
        super().__init__("; ".join(f"{e['path']}: {e['message']}" for e in errors))
        self.errors = errors


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


def load_presets(path: Path = PRESETS_PATH) -> dict[str, dict]:
    """The preset table as plain data."""
    return yaml.safe_load(path.read_text())


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin is typing.Union:
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _describe(inner[0]) + " or null"
    if origin is list:
        return "a list of " + _describe(typing.get_args(tp)[0]).removeprefix("a ").removeprefix("an ") + "s"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a float", str: "a string", bool: "true or false"}.get(tp, str(tp))


class _Checker:
    """Turns nested plain data into dataclasses, collecting every error on the way."""

    def __init__(self) -> None:
        self.errors: list[dict] = []

    def error(self, path: str, expected: str, found: Any, message: str) -> None:
        self.errors.append({"path": path, "expected": expected, "found": repr(found), "message": message})

    def convert(self, value: Any, tp: Any, path: str) -> Any:
        origin = typing.get_origin(tp)
        if origin is typing.Union:
            if value is None:
                return None
            inner = [a for a in typing.get_args(tp) if a is not type(None)][0]
            return self.convert(value, inner, path)
        if dataclasses.is_dataclass(tp):
            return self.build(tp, value, path)
        ok, converted = _scalar(value, tp)
        if not ok:
            expected = _describe(tp)
            self.error(path, expected, value, f"expected {expected}, found {value!r}")
        return converted

    def build(self, cls: type, data: Any, path: str) -> Any:
        if not isinstance(data, dict):
            self.error(path or "(root)", "a mapping", data, f"expected a mapping of keys, found {data!r}")
            return None
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in data.items():
            sub = f"{path}.{key}" if path else str(key)
            if key not in fields:
                known = ", ".join(sorted(fields))
                self.error(sub, "a known key", key, f"unknown key {key!r}; known keys here: {known}")
                continue
            kwargs[key] = self.convert(value, hints[key], sub)
        for name, f in fields.items():
            no_default = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if no_default and name not in data:
                sub = f"{path}.{name}" if path else name
                self.error(sub, _describe(hints[name]), None, f"missing required key {name!r}")
        if any(v is None and not _optional(hints[k]) for k, v in kwargs.items()):
            return None
        try:
            return cls(**kwargs)
        except TypeError:
            return None


def _optional(tp: Any) -> bool:
    return typing.get_origin(tp) is typing.Union and type(None) in typing.get_args(tp)


def _scalar(value: Any, tp: Any) -> tuple[bool, Any]:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return value in typing.get_args(tp), value
    if origin is list:
        if not isinstance(value, list):
            return False, value
        items = [_scalar(v, typing.get_args(tp)[0]) for v in value]
        return all(ok for ok, _ in items), [v for _, v in items]
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return True, float(value)
        if isinstance(value, str):  # PyYAML reads 3e-4 (no dot) as a string
            try:
                return True, float(value)
            except ValueError:
                return False, value
        return False, value
    if tp is str:
        return isinstance(value, str), value
    return False, value


def _semantic_errors(cfg: TrainConfig, presets: dict, chk: _Checker) -> None:
    if cfg.model not in MODEL_SIZES:
        chk.error("model", "one of " + ", ".join(MODEL_SIZES), cfg.model,
                  f"unknown model {cfg.model!r}; choose one of {', '.join(MODEL_SIZES)}")
    elif cfg.size not in MODEL_SIZES[cfg.model]:
        sizes = ", ".join(MODEL_SIZES[cfg.model])
        chk.error("size", "one of " + sizes, cfg.size, f"{cfg.model} has no size {cfg.size!r}; choose one of {sizes}")
    elif cfg.data.source not in MODEL_DATA[cfg.model]:
        ok = ", ".join(MODEL_DATA[cfg.model])
        chk.error("data.source", "one of " + ok, cfg.data.source, f"{cfg.model} cannot train on {cfg.data.source!r}; use {ok}")
    if cfg.gradient_compression not in presets:
        names = ", ".join(presets)
        chk.error("gradient_compression", "one of " + names, cfg.gradient_compression,
                  f"unknown preset {cfg.gradient_compression!r}; choose one of {names}")
    positive = {"steps": cfg.steps, "data.batch_size": cfg.data.batch_size, "data.seq_len": cfg.data.seq_len,
                "logging.log_every": cfg.logging.log_every}
    if cfg.diloco.inner_steps is not None:
        positive["diloco.inner_steps"] = cfg.diloco.inner_steps
    for path, value in positive.items():
        if value <= 0:
            chk.error(path, "a positive integer", value, f"{path} must be at least 1")
    if cfg.diloco.bits is not None and cfg.diloco.bits not in WIRE_BITS:
        chk.error("diloco.bits", "one of 32, 16, 8, 4, 1", cfg.diloco.bits, "wire bits must be 32, 16, 8, 4 or 1")
    if cfg.optim.lr <= 0:
        chk.error("optim.lr", "a positive float", cfg.optim.lr, "the learning rate must be positive")
    if len(cfg.optim.betas) != 2:
        chk.error("optim.betas", "two floats", cfg.optim.betas, "betas needs exactly two values")


def parse_config(data: Any, overrides: list[str] = ()) -> TrainConfig:
    """Plain data (+ `a.b=value` overrides) -> a checked TrainConfig, or ConfigError."""
    chk = _Checker()
    data = dict(data) if isinstance(data, dict) else data
    for item in overrides:
        if "=" not in item:
            chk.error(item, "key=value", item, f"override {item!r} is not of the form key=value")
            continue
        key, raw = item.split("=", 1)
        _set_dotted(data, key.strip(), yaml.safe_load(raw) if raw else "")
    cfg = chk.build(TrainConfig, data, "")
    if cfg is not None and not chk.errors:
        _semantic_errors(cfg, load_presets(), chk)
    if chk.errors:
        raise ConfigError(chk.errors)
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
    """Read a YAML config file; raises ConfigError with every problem found."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise ConfigError([{"path": "(file)", "expected": "valid YAML", "found": str(path),
                            "message": f"not valid YAML: {exc}"}]) from exc
    except OSError as exc:
        raise ConfigError([{"path": "(file)", "expected": "a readable file", "found": str(path),
                            "message": f"cannot read {path}: {exc.strerror}"}]) from exc
    return parse_config(data if data is not None else {}, overrides)


def resolve_compression(cfg: TrainConfig, presets: dict | None = None) -> Compression:
    """The preset named by the config, with the config's explicit overrides applied."""
    preset = (presets or load_presets())[cfg.gradient_compression]
    return Compression(
        preset=cfg.gradient_compression,
        algorithm=cfg.algorithm or preset["algorithm"],
        inner_steps=cfg.diloco.inner_steps or preset["inner_steps"],
        bits=cfg.diloco.bits or preset["bits"],
        block=cfg.diloco.block if cfg.diloco.block is not None else preset.get("block", 0),
        chunk=cfg.demo.chunk or preset.get("chunk", 64),
        topk=cfg.demo.topk or preset.get("topk", 4),
        outer_lr=cfg.diloco.outer_lr if cfg.diloco.outer_lr is not None else preset.get("outer_lr", 0.7),
        outer_momentum=(cfg.diloco.outer_momentum if cfg.diloco.outer_momentum is not None
                        else preset.get("outer_momentum", 0.9)),
    )


def config_to_dict(cfg: TrainConfig) -> dict:
    """The config as plain data (saved in checkpoints and sent to W&B)."""
    return dataclasses.asdict(cfg)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipes.config", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="validate a config file")
    check.add_argument("file")
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
