"""geotrain's own `recipes` package, loaded under a private name so that a user's `recipes`
(or `core`, `tui`) package on sys.path can neither shadow it nor be shadowed by it.

The recipes modules import each other absolutely (`from recipes.distributed import Wire`):
`python -m recipes.train` and the catalog rely on that. Here each module of ours is loaded
from its own file as `_geotrain_recipes.<name>`, and those imports are rewritten to the same
private name before it is compiled; nothing named `recipes` is imported or placed in
sys.modules. The rewritten code is never cached (its .pyc would sit beside the original's).
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ALIAS = "_geotrain_recipes"
PUBLIC = "recipes"
# The folder this package ships in (installed: recipes/geotrain_loop), or beside it (a pod's delivered
# source: /opt/geotrain/src/{recipes,geotrain_loop}, core.kubernetes.custom_command)
_HOME = Path(__file__).resolve().parent.parent
RECIPES_DIR = _HOME if (_HOME / "algorithms").is_dir() else _HOME / PUBLIC


class _RenameRecipes(ast.NodeTransformer):
    """`from recipes.x import y` -> `from _geotrain_recipes.x import y` (absolute imports only)."""

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.ImportFrom:
        if node.level == 0 and node.module and (node.module == PUBLIC or node.module.startswith(PUBLIC + ".")):
            node.module = ALIAS + node.module[len(PUBLIC):]
        return node

    def visit_Import(self, node: ast.Import) -> ast.Import:
        for alias in node.names:
            if alias.name == PUBLIC or alias.name.startswith(PUBLIC + "."):
                # `import recipes.x` binds the name `recipes`: no rename keeps that meaning
                raise ImportError(f"geotrain_loop cannot load a recipes module that says `import {alias.name}`: "
                                  f"write it as `from {PUBLIC} import ...`")
        return node


class _Loader(importlib.machinery.SourceFileLoader):
    def source_to_code(self, data, path, *, _optimize=-1):  # noqa: D401 - the importlib hook
        tree = _RenameRecipes().visit(ast.parse(data, filename=path))
        return compile(ast.fix_missing_locations(tree), path, "exec", dont_inherit=True, optimize=_optimize)

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)

    def set_data(self, *args, **kwargs) -> None:
        """No bytecode cache for rewritten code."""


class _Finder(importlib.abc.MetaPathFinder):
    """Finds `_geotrain_recipes[.x.y]` in RECIPES_DIR and nothing else."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != ALIAS and not fullname.startswith(ALIAS + "."):
            return None
        base = RECIPES_DIR.joinpath(*fullname.split(".")[1:])
        if (base / "__init__.py").is_file():
            init = str(base / "__init__.py")
            return importlib.util.spec_from_file_location(fullname, init, loader=_Loader(fullname, init),
                                                          submodule_search_locations=[str(base)])
        source = base.with_suffix(".py")
        if source.is_file():
            return importlib.util.spec_from_file_location(fullname, str(source), loader=_Loader(fullname, str(source)))
        return None


def _install() -> None:
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def load(name: str) -> ModuleType:
    """Our recipes module `name` ("distributed", "algorithms.diloco"), under the private name."""
    _install()
    return importlib.import_module(f"{ALIAS}.{name}")
