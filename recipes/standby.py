"""A worker started before it is needed: it pays for the slow part of a start (importing
torch and transformers, building the model once) up front, then waits on stdin for its
orders, so a lost worker is replaced in about a second instead of a minute.

    python -m recipes.standby --config CONFIG      # then, on stdin, one JSON line:
    {"env": {"RANK": "1", ...}, "argv": ["--config", "CONFIG"]}

End of stdin without orders: exit 0 (the run ended and the spare was not needed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipes.standby")
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    from recipes import train
    from recipes.config import load_config
    from recipes.models import build_model

    cfg = load_config(args.config, [])
    build_model(cfg.model, cfg.size)  # imports the model's modules now, not after a failure
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    orders = json.loads(line)
    os.environ.update(orders["env"])
    return train.main(orders["argv"])


if __name__ == "__main__":
    sys.exit(main())
