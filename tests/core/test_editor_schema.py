"""`--edit` files carry a yaml-language-server schema line; `workspaces schema` prints
the JSON Schema of a detailed config. A real editor is stood in by a small script."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml
from jsonschema import Draft202012Validator

from core.cli import main

# The modeline yaml-language-server reads (https://github.com/redhat-developer/yaml-language-server
# README, "Using inlined schema"): `# yaml-language-server: $schema=<urlToTheSchema>`.
MODELINE = "# yaml-language-server: $schema="

EDITOR = """\
import pathlib, sys
spec = pathlib.Path(sys.argv[2])
text = spec.read_text()
schema = text.splitlines()[0].split("$schema=", 1)[1]
out = pathlib.Path(sys.argv[1])
(out / "folder").write_text(str(spec.parent))
(out / "seen.yaml").write_text(text)
(out / "seen.schema.json").write_text(pathlib.Path(schema.removeprefix("file://")).read_text())
spec.write_text(text.replace("steps: 200", "steps: 7"))
"""


def test_edit_file_points_at_a_schema_that_validates_it(tmp_path, monkeypatch, capsys):
    script = tmp_path / "editor.py"
    script.write_text(EDITOR)
    monkeypatch.setenv("EDITOR", f"{sys.executable} {script} {tmp_path}")
    monkeypatch.delenv("VISUAL", raising=False)
    assert main(["workspaces", "deploy", "distributed-training", "--cluster", "local", "--edit", "--dry-run"]) == 0
    assert "steps: 7" in capsys.readouterr().out  # the edit was read back
    seen = (tmp_path / "seen.yaml").read_text()
    assert seen.startswith(MODELINE) and seen.splitlines()[0].endswith("spec.schema.json")
    validator = Draft202012Validator(json.loads((tmp_path / "seen.schema.json").read_text()))
    spec = yaml.safe_load(seen)
    assert list(validator.iter_errors(spec)) == []
    spec["workers"] = 0
    spec["config"]["optim"]["schedule"] = "zigzag"
    spec["config"]["data"]["bogus"] = 1
    assert len(list(validator.iter_errors(spec))) == 3
    folder = Path((tmp_path / "folder").read_text())
    assert folder.name.startswith("geotrain-edit-") and not folder.exists()  # removed afterwards


def test_schema_command_prints_or_writes_the_config_schema(tmp_path, capsys):
    assert main(["workspaces", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    Draft202012Validator.check_schema(schema)
    assert schema["properties"]["optim"] == {"$ref": "#/$defs/OptimConfig", "description": "Inner optimizer."}
    out = tmp_path / "config.schema.json"
    assert main(["workspaces", "schema", "--spec", "--output", str(out)]) == 0
    assert MODELINE + out.resolve().as_uri() in capsys.readouterr().out
    assert "workers" in json.loads(out.read_text())["required"]
