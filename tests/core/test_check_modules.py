"""The modules `clusters check` ships to a node (over SSH stdin, or a Kubernetes ConfigMap) are all a
rank imports of recipes: the node has no geotrain installed, so one left out fails every node
(as recipes.elastic_store_wire once did, seen only by the root-only SSH test in CI)."""

from __future__ import annotations

import ast
from pathlib import Path

from core.domain.check_modules import MODULES

ROOT = Path(__file__).resolve().parents[2]


def _recipes_imports(module: str) -> set[str]:
    path = ROOT / (module.replace(".", "/") + ("/__init__.py" if module == "recipes" else ".py"))
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "recipes":
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names
                         if (ROOT / node.module.replace(".", "/") / f"{a.name}.py").exists())
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "recipes")
    return found


def test_every_recipes_module_a_shipped_module_imports_is_shipped():
    missing = {f"{m} imports {i}" for m in MODULES for i in _recipes_imports(m) if i not in MODULES}
    assert missing == set()
