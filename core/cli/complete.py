"""Shell completion of workspace ids, node and cluster names (read from the state store) and
of models, sizes and presets (from the recipe catalog).

Completion runs on every <Tab>: it opens the database read-only (never creating the data
directory or a database) and answers nothing rather than raise.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from pathlib import Path

import platformdirs
from click.shell_completion import CompletionItem


def _quiet(completer):
    """A completer that offers nothing instead of raising: a <Tab> must never print a traceback."""
    @functools.wraps(completer)
    def safe(ctx, param, incomplete: str) -> list[CompletionItem]:
        try:
            return completer(ctx, param, incomplete)
        except Exception:  # noqa: BLE001 — any failure means no suggestions, never an error
            return []
    return safe


def _database() -> Path:
    override = os.environ.get("GEOTRAIN_HOME")
    home = Path(override).expanduser() if override else Path(platformdirs.user_data_dir("geotrain"))
    return home / "state.sqlite3"


def _names(query: str, incomplete: str) -> list[str]:
    path = _database()
    if not path.is_file():
        return []
    try:
        with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=1) as conn:
            rows = conn.execute(query).fetchall()
    except (sqlite3.Error, OSError, ValueError):
        return []
    return sorted(str(row[0]) for row in rows if str(row[0]).startswith(incomplete))


@_quiet
def workspace_ids(ctx, param, incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(n) for n in _names("SELECT id FROM workspaces", incomplete)]


@_quiet
def node_names(ctx, param, incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(n) for n in _names("SELECT name FROM nodes", incomplete)]


@_quiet
def node_name_lists(ctx, param, incomplete: str) -> list[CompletionItem]:
    """`--nodes a,b,<Tab>`: the names not yet in the comma-separated list, after what is typed."""
    done, _, last = incomplete.rpartition(",")
    taken = set(done.split(",")) if done else set()
    prefix = f"{done}," if done else ""
    return [CompletionItem(prefix + n) for n in _names("SELECT name FROM nodes", last) if n not in taken]


@_quiet
def cluster_names(ctx, param, incomplete: str) -> list[CompletionItem]:
    found = set(_names("SELECT name FROM clusters", incomplete))
    if "local".startswith(incomplete):
        found.add("local")  # built in, whether or not the store has a row for it yet
    return [CompletionItem(n) for n in sorted(found)]


def _catalog(names, incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


@_quiet
def models(ctx, param, incomplete: str) -> list[CompletionItem]:
    from core.domain import recipe_catalog

    return _catalog(recipe_catalog.models(), incomplete)


@_quiet
def sizes(ctx, param, incomplete: str) -> list[CompletionItem]:
    """The sizes of the --model already typed, else every model's."""
    from core.domain import recipe_catalog

    catalog = recipe_catalog.models()
    model = ctx.params.get("model") if ctx is not None else None
    known = catalog.get(model) or sorted({s for sizes in catalog.values() for s in sizes})
    return _catalog(known, incomplete)


@_quiet
def presets(ctx, param, incomplete: str) -> list[CompletionItem]:
    from core.domain import recipe_catalog

    return _catalog(recipe_catalog.presets(), incomplete)
