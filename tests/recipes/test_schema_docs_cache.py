"""The schema's field docs, preset names and JSON Schema come from a cache keyed by the files
they are built from (recipes/schema/docs_cache.py, issue 45): built once, rebuilt when a file
changes, and never an error when the cache is unreadable or cannot be written."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from recipes.schema import docs_cache, field_help, json_schema
from recipes.schema import models


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(docs_cache, "cache_dir", lambda: tmp_path / "cache")
    return tmp_path / "cache"


def test_built_once_and_again_only_when_an_input_changes(tmp_path):
    source = tmp_path / "models.py"
    source.write_text("class A:\n    x: int\n    'the x'\n")
    builds = []

    def build():
        builds.append(1)
        return docs_cache.attribute_docs(source.read_text())

    assert docs_cache.cached("field-docs", [source], build) == {"A": {"x": "the x"}}
    assert docs_cache.cached("field-docs", [source], build) == {"A": {"x": "the x"}}
    assert len(builds) == 1
    source.write_text("class A:\n    x: int\n    'the x, edited'\n")
    assert docs_cache.cached("field-docs", [source], build) == {"A": {"x": "the x, edited"}}
    assert len(builds) == 2


def test_a_broken_or_unwritable_cache_is_rebuilt_not_an_error(tmp_path, private_cache, monkeypatch):
    source = tmp_path / "f.py"
    source.write_text("x = 1\n")
    assert docs_cache.cached("kind", [source], lambda: [1]) == [1]
    for written in private_cache.iterdir():
        written.write_text("{not json")
    assert docs_cache.cached("kind", [source], lambda: [2]) == [2]
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setattr(docs_cache, "cache_dir", lambda: blocked / "cache")  # cannot be made, even by root
    assert docs_cache.cached("kind", [source], lambda: [3]) == [3]
    monkeypatch.setattr(docs_cache, "cache_dir", lambda: None)  # no platformdirs (a recipes pod)
    assert docs_cache.cached("kind", [source], lambda: [4]) == [4]


def test_every_field_has_the_docstring_written_under_it_in_models_py():
    """What pydantic's use_attribute_docstrings gave: the string right under each field."""
    tree = ast.parse(Path(models.__file__).read_text())
    written = {}
    for node in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for field, doc in zip(node.body, node.body[1:]):
            if isinstance(field, ast.AnnAssign) and isinstance(doc, ast.Expr):
                written[(node.name, field.target.id)] = " ".join(doc.value.value.split())
    sections = [models.OptimConfig, models.DilocoConfig, models.DemoConfig, models.DataConfig,
                models.LoggingConfig, models.CheckpointConfig, models.DistConfig, models.TrainConfig]
    for section in sections:
        for name, info in section.model_fields.items():
            assert " ".join((info.description or "").split()) == written[(section.__name__, name)]
    assert field_help("optim.lr").description == "Peak learning rate after warmup."


def test_the_cached_json_schema_is_the_models_own():
    schema = json_schema()
    assert schema == json_schema()  # the second one read from the cache
    built = models.TrainConfig.model_json_schema()
    assert {k: v for k, v in schema.items() if k != "$schema"} == built
    assert schema["properties"]["optim"]["description"] == "Inner optimizer."
