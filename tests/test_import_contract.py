"""The layering, written down and checked (kopf's .importlinter idea, without the dependency).

tui -> core; core never -> tui or textual; nothing -> recipes except by launching it,
save `recipes.schema` (the torch-free typed config both sides share); screens never -> screens; each core folder imports only the folders its __init__ names;
no import circle between modules anywhere.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What each core folder may import from core, besides itself (its __init__ docstring says the same).
ALLOWED = {
    "core.errors": set(),
    "core.schema": {"core.errors"},
    "core.domain": {"core.errors", "core.schema"},
    "core.state": {"core.errors", "core.schema", "core.domain"},
    "core.nodes": {"core.errors", "core.schema", "core.domain", "core.state"},
    "core.kubernetes": {"core.errors", "core.schema", "core.domain", "core.state"},
    "core.planner": {"core.errors", "core.schema", "core.domain", "core.state"},
    "core.bootstrap": {"core.errors", "core.schema", "core.domain", "core.state", "core.nodes"},
    "core.backends": {"core.errors", "core.schema", "core.domain", "core.state", "core.kubernetes"},
    "core.requirements": {"core.errors", "core.schema", "core.domain", "core.state", "core.nodes",
                          "core.kubernetes"},
    "core.workspaces": {"core.errors", "core.schema", "core.domain", "core.state", "core.backends",
                        "core.kubernetes", "core.nodes"},
    # the `clusters check` service (local, SSH, Kubernetes ways), beside core.workspaces
    "core.cluster_checks": {"core.errors", "core.schema", "core.domain", "core.state", "core.planner",
                            "core.bootstrap", "core.backends", "core.kubernetes"},
    "core.cli": {"core.errors", "core.schema", "core.domain", "core.state", "core.nodes",
                 "core.kubernetes", "core.planner", "core.bootstrap", "core.backends", "core.workspaces",
                 "core.requirements", "core.cluster_checks"},
}


@cache
def modules() -> dict[str, Path]:
    found = {}
    for top in ("core", "tui", "recipes", "themes"):
        for path in (ROOT / top).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


@cache
def imports_of(module: str) -> frozenset[str]:
    """Every module `module` imports (top level or inside a function), by full name."""
    names = set()
    for node in ast.walk(ast.parse(modules()[module].read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                names.add(full if full in modules() else node.module)
    return frozenset(names - {module})


def folder(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "core" else parts[0]


def in_project(name: str) -> bool:
    return name.split(".")[0] in ("core", "tui", "recipes", "themes")


SHARED_SCHEMA = "recipes.schema"


def from_recipes(name: str) -> bool:
    """An import of recipes other than the one shared schema package (and its modules)."""
    return name.split(".")[0] == "recipes" and name != SHARED_SCHEMA \
        and not name.startswith(SHARED_SCHEMA + ".")


def test_core_never_imports_tui_textual_or_recipes_but_the_shared_schema():
    bad = [(m, i) for m in modules() if m.startswith("core")
           for i in imports_of(m) if i.split(".")[0] in ("tui", "textual") or from_recipes(i)]
    assert bad == []


def test_the_shared_schema_imports_only_itself_and_the_plain_catalog():
    bad = [(m, i) for m in modules() if m.startswith(SHARED_SCHEMA) for i in imports_of(m)
           if in_project(i) and not i.startswith(SHARED_SCHEMA) and i != "recipes.catalog"]
    assert bad == []


def test_importing_the_schema_layer_pulls_in_no_torch():
    import subprocess
    import sys

    probe = ("import sys, recipes.schema, core.schema.training_config, core.domain.records, "
             "core.domain.recovery, core.nodes.import_file; print(sorted(m for m in sys.modules "
             "if m.split('.')[0] in ('torch', 'transformers', 'numpy')))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_tui_never_imports_recipes_and_recipes_never_import_core_or_tui():
    bad = [(m, i) for m in modules() if m.startswith("tui") for i in imports_of(m) if from_recipes(i)]
    bad += [(m, i) for m in modules() if m.startswith("recipes")
            for i in imports_of(m) if i.split(".")[0] in ("core", "tui", "textual")]
    assert bad == []


SCREEN_BASES = {"tui.screens.base", "tui.screens.table_screen"}


def test_screens_never_import_screens():
    """Navigation goes through the app; a screen may only build on the shared base classes."""
    bad = [(m, i) for m in modules() if m.startswith(("tui.screens.", "tui.modals.", "tui.widgets."))
           for i in imports_of(m) if i.startswith("tui.screens.") and i not in SCREEN_BASES]
    assert bad == []


@pytest.mark.parametrize("source", sorted(ALLOWED))
def test_each_core_folder_imports_only_what_it_may(source):
    bad = sorted({(m, i) for m in modules() if folder(m) == source for i in imports_of(m)
                  if i.startswith("core.") and folder(i) != source and folder(i) not in ALLOWED[source]})
    assert bad == []


def test_every_folder_says_what_lives_there():
    for init in list((ROOT / "core").rglob("__init__.py")) + list((ROOT / "tui").rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc, f"{init.relative_to(ROOT)} needs a docstring: what lives here and what it may import"


def test_core_root_holds_a_handful_of_modules():
    loose = sorted(p.name for p in (ROOT / "core").glob("*.py"))
    assert len(loose) <= 5, loose


def test_no_import_circle_between_modules():
    graph = {m: {i for i in imports_of(m) if i in modules()} for m in modules()}
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node):  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in graph[node]:
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                circles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    assert circles == []


def test_only_the_ssh_modules_import_paramiko():
    """ssh.py and the piece split out of it (SFTP uploads); ~/.ssh/config has its own parser."""
    importers = {m for m in modules() if any(i.split(".")[0] == "paramiko" for i in imports_of(m))}
    assert importers == {"core.nodes.ssh", "core.nodes.ssh_sftp"}


def test_the_app_and_the_cli_start_without_paramiko():
    """paramiko (~0.15 s of start-up) loads with the first SSH connection, not with `geotrain --help`
    or the app's first screen: start-up imports name only core/nodes/ssh_errors.py."""
    import subprocess
    import sys

    probe = ("import sys; from core.cli import GROUPS, build_parser; cli = build_parser(); "
             "[cli.commands[g].list_commands(None) for g in GROUPS]; import tui.app; "
             "from core.nodes.pool import NodePool; print(sorted(m for m in sys.modules "
             "if m.split('.')[0] == 'paramiko' or m == 'core.nodes.ssh'))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
