"""CI (.ci/run): the recipes' locked dependencies work beside CI's torch. Run as
`python -m tests.lock_imports DIR` after `pip install --no-deps --require-hashes --target DIR
-r recipes/requirements.lock` (what the pods install, core.kubernetes.recipes_delivery): DIR
goes first on sys.path, every locked top-level module must load from DIR, and every recipes
module (but the benchmarks, which pods never run) is imported. Prints the torch version and
the modules; exits 1 naming each that failed. Not a pytest test: it needs the fresh DIR."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The import names of recipes/requirements.in's packages
LOCKED = ("transformers", "datasets", "huggingface_hub", "wandb", "yaml", "pydantic", "torch_geometric",
          "PIL", "soundfile", "pandas")


def main(target: str) -> int:
    sys.path[:0] = [str(Path(target).resolve()), str(REPO)]
    import torch

    print(f"torch {torch.__version__} from {Path(torch.__file__).parent}")
    failed = []
    for name in LOCKED:
        module = importlib.import_module(name)
        if not str(Path(module.__file__).resolve()).startswith(str(Path(target).resolve())):
            failed.append(f"{name}: loaded from {module.__file__}, not the locked install in {target}")
    import recipes

    names = [m.name for m in pkgutil.walk_packages(recipes.__path__, "recipes.") if not m.name.startswith("recipes.bench")]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - each failure is reported, then the run fails
            failed.append(f"{name}: {traceback.format_exc(limit=2).strip().splitlines()[-1]}")
    print(f"{len(names) - len(failed)} of {len(names)} recipes modules imported with the lock's dependencies")
    for line in failed:
        print(f"FAILED {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
