"""The click commands keep what the argparse ones did: one-line usage errors (exit 2), a
group without a command shows its help (exit 2), `--from-ssh-config A B` takes several aliases."""

import pytest

from core.cli import main


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("argv, message", [
    (["workspaces", "deploy"], "Missing argument '{distributed-training|custom-training}'"),
    (["workspaces", "deploy", "pretraining"], "'pretraining' is not"),
    (["workspaces", "list", "--colour"], "--colour"),
    (["nodes", "refresh", "--connect-timeout", "inf"], "--connect-timeout"),
    (["nodes", "import-ssh", "--name", "a"], "Missing option '--endpoint'"),
    (["clusters", "nope"], "No such command 'nope'"),
])
def test_usage_errors_are_one_line_naming_the_help(argv, message, capsys, geotrain_home):
    assert main(argv) == 2
    err = _one_line(capsys)
    assert message in err and f"see `geotrain {' '.join(argv[:1 if argv[0] == 'clusters' else 2])} --help`" in err


def test_a_group_without_a_command_prints_its_help_and_exits_2(capsys):
    assert main(["nodes"]) == 2
    assert "import-ssh" in capsys.readouterr().out


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("geotrain ")


def test_from_ssh_config_takes_several_aliases(tmp_path, capsys, geotrain_home):
    config = tmp_path / "ssh_config"
    config.write_text("Host a\n  HostName 10.0.0.1\n  User u\nHost b\n  HostName 10.0.0.2\n")
    assert main(["nodes", "import", "--from-ssh-config", "a", "b", "--ssh-config", str(config)]) == 2
    assert "Host b has no User" in _one_line(capsys)  # b was read as a second alias, not as FILE


def test_help_lists_the_catalog(capsys):
    from core.domain import recipe_catalog

    assert main(["workspaces", "deploy", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert all(model in out for model in recipe_catalog.models())
    assert all(preset in out for preset in recipe_catalog.presets())
