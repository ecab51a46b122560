"""recipes/config.py reads YAML within limits of its own (recipes never import core):
alias bombs, deep nesting and self-references are ConfigErrors, not hangs or RecursionErrors."""

import subprocess
import sys
from pathlib import Path

import pytest

from recipes.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9))


@pytest.mark.parametrize("text", [BOMB, "[" * 100_000, "&a [*a]", "".join("  " * i + "k:\n" for i in range(500)),
                                  "seed: " + "9" * 5000])
def test_hostile_yaml_is_a_config_error(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.errors[0]["path"] == "(file)"


def test_hostile_override_is_a_config_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text((ROOT / "recipes" / "configs" / "gpt-neo" / "tiny.yaml").read_text())
    with pytest.raises(ConfigError) as info:
        load_config(path, ["seed=" + "[" * 5000])
    assert info.value.errors[0]["path"] == "seed"


def test_the_checker_reads_a_config_from_stdin():
    config = (ROOT / "recipes" / "configs" / "gpt-neo" / "tiny.yaml").read_text()
    proc = subprocess.run([sys.executable, "-m", "recipes.config", "check", "-", "--json"], input=config,
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert (proc.returncode, proc.stdout.strip()) == (0, "[]"), proc.stderr
