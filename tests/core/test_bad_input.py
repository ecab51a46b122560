"""Bad input: one line saying what is wrong and what to do, exit 2, state unchanged."""

import sqlite3

import pytest

from core.cli import main
from core.state.store import Store


def _state(home):
    Store()
    conn = sqlite3.connect(home / "state.sqlite3")
    rows = conn.execute("SELECT * FROM workspaces").fetchall()
    files = sorted(p.name for p in (home / "workspaces").glob("*")) if (home / "workspaces").exists() else []
    return rows, files


def _deploy(*extra):
    return ["workspaces", "deploy", "distributed-training", "--cluster", "local", *extra]


CASES = {
    "unknown model": (_deploy("--model", "gpt-5"), "unknown model 'gpt-5'", "--model"),
    "unknown size": (_deploy("--size", "galactic"), "unknown size", "--size"),
    "unknown preset": (_deploy("--gradient-compression", "extreme"), "unknown preset", "none"),
    "zero workers": (_deploy("--workers", "0"), "--workers must be 1 or more", "--workers"),
    "negative workers": (_deploy("--workers", "-3"), "--workers must be 1 or more", "--workers"),
    "zero steps": (_deploy("--steps", "0"), "--steps must be 1 or more", "--steps"),
    "non-numeric workers": (_deploy("--workers", "two"), "invalid int value", "--help"),
    "unknown --set key": (_deploy("--set", "nonexistent.key=3"), "no config key 'nonexistent.key'", "keys under"),
    "--set without =": (_deploy("--set", "steps"), "is not key=value", "--set"),
    "unknown cluster": (_deploy("--cluster", "mars"), "no cluster named 'mars'", "local"),
    "unknown id for logs": (["workspaces", "logs", "gpt-neo-000000"], "no workspace with id", "list"),
    "unknown id for delete": (["workspaces", "delete", "nope", "--yes"], "no workspace with id", "list"),
    "unknown id for show": (["workspaces", "show", "nope"], "no workspace with id", "list"),
    "wrong type via --set": (_deploy("--set", "steps=abc", "--dry-run"), "config.steps: expected an integer, found 'abc'", "--set steps=VALUE"),
    "missing config file": (_deploy("--config", "/nonexistent.yaml"), "cannot read --config", "YAML"),
    "token with spaces": (_deploy("--wandb-token", "a b c", "--dry-run"), "whitespace", "paste"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_clear_line_and_changes_nothing(name, geotrain_home, capsys):
    argv, message, hint = CASES[name]
    before = _state(geotrain_home)
    assert main(argv) == 2  # a usage error too: click's, printed as one line by core.cli.main
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert message in err and hint in err, err
    assert _state(geotrain_home) == before


def test_malformed_yaml_config_names_the_line(geotrain_home, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: gpt-neo\nsteps: [1, 2\n")
    before = _state(geotrain_home)
    assert main(_deploy("--config", str(bad))) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.yaml line 3" in err and "malformed YAML" in err and "fix the YAML" in err
    assert _state(geotrain_home) == before


def test_config_field_of_wrong_type_gives_its_path(geotrain_home, tmp_path, capsys):
    from core.domain.recipe_catalog import default_config

    import yaml

    config = default_config("gpt-neo", "tiny")
    config["steps"] = "many"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    before = _state(geotrain_home)
    assert main(_deploy("--config", str(path))) == 2
    err = capsys.readouterr().err.strip()
    assert "steps" in err and "many" in err, err
    assert _state(geotrain_home) == before


def test_spec_file_with_wrong_type_for_a_nested_config_field(geotrain_home, tmp_path, capsys):
    from core.domain.recipe_catalog import default_config

    import yaml

    config = default_config("gpt-neo", "tiny")
    nested = next(k for k, v in config.items() if isinstance(v, dict) and v)
    leaf = next(iter(config[nested]))
    assert main(_deploy("--set", f"{nested}.{leaf}=[not, a, scalar]")) == 2
    err = capsys.readouterr().err.strip()
    assert f"config.{nested}.{leaf}" in err, err


def test_every_command_prints_its_help(capsys):
    from core.cli import GROUPS, build_parser

    cli = build_parser()
    for group_name in GROUPS:
        for command in cli.commands[group_name].list_commands(None):  # loads the group's modules
            assert main([group_name, command, "--help"]) == 0, f"{group_name} {command} --help"
            assert "Usage: geotrain " in capsys.readouterr().out


def test_corrupt_state_database_is_a_clear_error(geotrain_home, capsys):
    geotrain_home.mkdir(parents=True, exist_ok=True)
    (geotrain_home / "state.sqlite3").write_bytes(b"not a database at all" * 100)
    assert main(["workspaces", "list"]) == 2
    err = capsys.readouterr().err
    assert "cannot be used" in err and "move it away" in err


def test_data_directory_that_is_a_file_is_a_clear_error(tmp_path, monkeypatch, capsys):
    home = tmp_path / "file"
    home.write_text("x")
    monkeypatch.setenv("GEOTRAIN_HOME", str(home))
    assert main(["clusters", "list"]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err


def test_config_file_that_is_not_text_is_a_clear_error(geotrain_home, tmp_path, capsys):
    binary = tmp_path / "weights.bin"
    binary.write_bytes(bytes(range(256)))
    assert main(_deploy("--config", str(binary))) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err


def test_cluster_name_cannot_escape_the_data_directory(geotrain_home, tmp_path, capsys):
    assert main(["clusters", "deploy", "../../escape", "--nodes", "a", "--dry-run"]) == 2
    assert "cluster name '../../escape' is not valid" in capsys.readouterr().err
    assert not (tmp_path / "escape").exists()
