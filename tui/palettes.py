"""Themes as data: each `themes/geotrain-*.tcss` lists `$name: colour;` lines, turned
here into a Textual Theme, so a new theme is one file and needs no Python."""

from __future__ import annotations

import re
from pathlib import Path

from textual.theme import Theme

import themes

_VARIABLE = re.compile(r"^\s*\$([a-z0-9-]+)\s*:\s*([^;]+);", re.MULTILINE)
_BASE_FIELDS = ("primary", "secondary", "accent", "warning", "error", "success",
                "foreground", "background", "surface", "panel")
DEFAULT_THEME = "geotrain-dark"


THEMES_DIR = Path(themes.__file__).resolve().parent


def theme_files() -> list[Path]:
    return sorted(THEMES_DIR.glob("geotrain-*.tcss"))


def load_theme(path: Path) -> Theme:
    values = dict(_VARIABLE.findall(path.read_text()))
    base = {k: values.pop(k).strip() for k in _BASE_FIELDS if k in values}
    dark = values.pop("dark", "true").strip() == "true"
    return Theme(name=path.stem, dark=dark, variables={k: v.strip() for k, v in values.items()},
                 **base)


def load_themes() -> list[Theme]:
    return [load_theme(path) for path in theme_files()]


def worker_colours(theme: Theme) -> list[str]:
    """The palette that tints log lines, one colour per worker (cycled)."""
    found = [theme.variables[k] for k in sorted(theme.variables) if k.startswith("worker-")]
    return found or ["#4ea1ff", "#ffb454", "#7bd88f", "#ff79c6"]
