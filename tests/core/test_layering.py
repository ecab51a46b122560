"""The layering rules: core is headless; nothing imports recipes but `recipes.schema`,
the torch-free typed config core and the recipes share."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_core_imports_without_textual_or_recipes():
    code = ("import sys, core.cli, core.workspaces, core.backends.local.backend, core.state.store;"
            "cli = core.cli.build_parser(); [cli.commands[g].list_commands(None) for g in core.cli.GROUPS];"
            "shared = ('recipes', 'recipes.catalog', 'recipes.schema');"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'recipes', 'tui', 'torch')"
            " and not (m in shared or m.startswith('recipes.schema.'))];"
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_source_file_imports_across_the_layers():
    offenders = []
    for path in list((ROOT / "core").rglob("*.py")) + list((ROOT / "tui").rglob("*.py")):
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith(("import recipes", "from recipes")) and not stripped.startswith(
                    ("from recipes import schema", "from recipes.schema import")):
                offenders.append(f"{path}: {stripped}")
            if path.is_relative_to(ROOT / "core") and stripped.startswith(("import textual", "from textual")):
                offenders.append(f"{path}: {stripped}")
    assert offenders == []
