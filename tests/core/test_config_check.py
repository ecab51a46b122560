"""The editor's checker: all problems at once, with field path and line, checked in-process;
the hint beside the cursor; the JSON Schema editors validate against."""

import yaml

from core.domain import recipe_catalog
from core.schema.training_config import (check_config_text, config_errors, config_json_schema, field_hint,
                                         key_path_at, line_of)


def _text(**changes):
    config = recipe_catalog.default_config("gpt-neo", "tiny")
    config["optim"].update(changes)
    return yaml.safe_dump(config, sort_keys=False)


def test_line_of_finds_nested_keys_and_falls_back_to_the_parent():
    text = "model: gpt-neo\noptim:\n  lr: 0.1\n  betas: [0.9, 0.95]\n"
    assert line_of(text, "optim.lr") == 3
    assert line_of(text, "optim.betas") == 4
    assert line_of(text, "optim.missing") == 2
    assert line_of(text, "nowhere") is None
    assert line_of("a: [", "a") is None


def test_valid_config_has_no_problem():
    assert check_config_text(_text()) == []


def test_wrong_type_names_the_path_and_its_line():
    text = _text(lr="fast")
    problems = check_config_text(text)
    assert [p.path for p in problems] == ["config.optim.lr"]
    assert "float" in problems[0].message
    assert text.splitlines()[problems[0].line - 1].strip().startswith("lr:")


def test_malformed_yaml_and_non_mapping():
    problems = check_config_text("optim:\n  lr: [1, 2\n")
    assert problems[0].path == "config" and "malformed YAML" in problems[0].message
    assert problems[0].line is not None
    assert "mapping" in check_config_text("- 1\n- 2\n")[0].message


def test_checks_run_in_process_without_starting_a_python(monkeypatch):
    import subprocess

    def no_process(*args, **kwargs):
        raise AssertionError(f"a process was started: {args[0]!r}")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    assert check_config_text(_text()) == []
    assert [p.path for p in check_config_text(_text(lr=0))] == ["config.optim.lr"]
    assert [e.path for e in config_errors({"model": "gpt-neo", "size": "tiny", "steps": "x"})] == ["config.steps"]


def test_every_problem_at_once_in_the_schema_words():
    problems = check_config_text(_text(lr=-1, schedule="zigzag", bogus=1))
    said = {p.path: p.message for p in problems}
    assert said["config.optim.lr"] == "optim.lr must be > 0, found -1"
    assert said["config.optim.schedule"] == "expected one of 'cosine', 'constant', found 'zigzag'"
    assert said["config.optim.bogus"].startswith("unknown key 'bogus'; known keys here: betas, grad_clip")
    assert all(p.line for p in problems)


TEXT = "# a comment\nmodel: gpt-neo\noptim:\n  lr: 0.1\n  betas:\n  - 0.9\n  - 0.95\n  bogus: 1\nsteps: [\n"


def test_key_path_at_follows_indentation_even_when_the_text_does_not_parse():
    paths = [key_path_at(TEXT, row) for row in range(len(TEXT.splitlines()) + 1)]
    assert paths == [None, "model", "optim", "optim.lr", "optim.betas", "optim.betas", "optim.betas",
                     "optim.bogus", "steps", None]


def test_field_hint_gives_documentation_type_choices_and_default():
    assert field_hint("optim.lr") == "optim.lr: Peak learning rate after warmup. · a float > 0 · default 0.003"
    assert "one of 'cosine', 'constant' · default 'cosine'" in field_hint("optim.schedule")
    assert "one of 32, 16, 8, 4, 1 or null" in field_hint("diloco.bits")
    assert field_hint("optim").startswith("optim: Inner optimizer. · a mapping: name, lr, weight_decay")
    assert "one of 'adamw', 'muon' · default 'adamw'" in field_hint("optim.name")
    assert "'bogus' is not a key here; known keys: name, lr," in field_hint("optim.bogus")
    assert field_hint(None) is None


def test_json_schema_accepts_every_shipped_config_and_rejects_mistakes():
    # JSON Schema 2020-12 (https://json-schema.org/draft/2020-12), what yaml-language-server reads
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(config_json_schema())
    Draft202012Validator.check_schema(config_json_schema())
    for model, sizes in recipe_catalog.models().items():
        for size in sizes:
            assert list(validator.iter_errors(recipe_catalog.default_config(model, size))) == [], (model, size)
    good = recipe_catalog.default_config("gpt-neo", "tiny")
    for path, value in [("steps", 0), ("optim.schedule", "zigzag"), ("optim.bogus", 1), ("size", "arxiv"),
                        ("data.source", "imagenet"), ("diloco.bits", 3), ("model", "gpt-5")]:
        bad = yaml.safe_load(yaml.safe_dump(good))
        *parents, leaf = path.split(".")
        node = bad
        for part in parents:
            node = node[part]
        node[leaf] = value
        assert list(validator.iter_errors(bad)), path
