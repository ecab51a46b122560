"""What the schema says about itself, worked out once and kept between runs: each field's
documentation (the docstring under it in models.py), the preset names it accepts and the
JSON Schema editors read.

pydantic's `use_attribute_docstrings` parses the models' source at every import, and the
JSON Schema needs every model built; on a slow machine that was over a second before the
app or a command could start (issue 45). Here both are built on first use and written to
the user's cache directory under a key made of the files they come from and the pydantic
version, so an edited models.py, catalog or preset list is a new key, never a stale answer.
A cache that cannot be read or written is rebuilt or skipped, never an error.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
RECIPES = HERE.parent


def cache_dir() -> Path | None:
    """The user's cache directory; None where platformdirs is not installed (a recipes pod
    installs only what the recipes import): there every start builds, as before."""
    try:
        import platformdirs
    except ImportError:
        return None
    return Path(platformdirs.user_cache_dir("geotrain"))


def _key(inputs: list[Path]) -> str:
    import pydantic

    digest = hashlib.sha256(pydantic.VERSION.encode())
    for path in inputs:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:24]


def cached(kind: str, inputs: list[Path], build: Callable[[], Any]) -> Any:
    """`build()` (plain JSON data), read from the cache when `inputs` are unchanged since it was
    written, else built and written there for the next start."""
    folder = cache_dir()
    if folder is None:
        return build()
    path = folder / f"{kind}-{_key(inputs)}.json"
    try:
        return json.loads(path.read_text())["value"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    value = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{kind}-")
        with os.fdopen(fd, "w") as file:
            json.dump({"value": value}, file)
        os.replace(temporary, path)
    except OSError:
        pass  # a read-only home (a pod): built again next time, as before there was a cache
    return value


def attribute_docs(source: str) -> dict[str, dict[str, str]]:
    """Class name -> field -> the string right under the field, as pydantic's
    use_attribute_docstrings reads it (cleaned like a docstring)."""
    docs: dict[str, dict[str, str]] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields = docs.setdefault(node.name, {})
        for before, after in zip(node.body, node.body[1:]):
            if (isinstance(before, ast.AnnAssign) and isinstance(before.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                fields[before.target.id] = inspect.cleandoc(after.value.value)
    return docs


def document(models: list[type], source: Path) -> None:
    """Give the fields of `models` (all defined in `source`) their docstrings as descriptions,
    before anything builds them (they are defer_build)."""
    docs = cached("field-docs", [source], lambda: attribute_docs(source.read_text()))
    for model in models:
        own = docs.get(model.__name__, {})
        for name, info in model.model_fields.items():
            if info.description is None and name in own:
                info.description = own[name]
