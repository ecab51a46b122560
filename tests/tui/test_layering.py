"""tui talks only to core: it never imports recipes (but the shared recipes.schema), paramiko or
kubernetes itself."""

import ast
from pathlib import Path

TUI = Path(__file__).resolve().parents[2] / "tui"


def test_tui_imports_no_recipes_ssh_or_kubernetes():
    offending = []
    for path in TUI.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offending += [f"{path.name}: {n}" for n in names  # recipes.schema: the shared typed config
                          if n.split(".")[0] in ("recipes", "paramiko", "kubernetes") and n != "recipes.schema"]
    assert offending == []
    assert any(TUI.rglob("*.py"))
