"""The editor's checker: all problems at once, with field path and line."""

from core.domain import recipe_catalog
from core.schema.training_config import check_config_text, line_of
import yaml


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
