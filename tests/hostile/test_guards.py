"""Guards that keep the hostile-input fixes from being undone by a new line of code:
YAML is read only through the bounded loaders, and notifications with data are literal."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNBOUNDED_YAML = re.compile(r"\byaml\.(safe_load|load|full_load|unsafe_load|compose|load_all|safe_load_all)\(")


def _sources(*dirs: str):
    for name in dirs:
        yield from sorted((ROOT / name).rglob("*.py"))


def test_yaml_is_read_only_through_the_bounded_loaders():
    offenders = [f"{path.relative_to(ROOT)}:{number}" for path in _sources("core", "tui", "recipes")
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if UNBOUNDED_YAML.search(line)]
    assert offenders == [], "use core.schema.yaml_loader.load_yaml (recipes: recipes.config.safe_yaml)"


def test_notifications_built_from_data_are_not_parsed_as_markup():
    offenders = []
    for path in _sources("tui"):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            if re.search(r"\bnotify\(f[\"']", line):
                call, depth = "", 0
                for part in lines[number - 1:number + 5]:  # the call, to its closing parenthesis
                    call += part
                    depth += part.count("(") - part.count(")")
                    if depth <= 0:
                        break
                if "markup=False" not in call:
                    offenders.append(f"{path.relative_to(ROOT)}:{number}")
    assert offenders == [], "pass markup=False: a name or id in the message may hold [brackets]"
