"""`--set` accepts every key of the training schema, also one the model's YAML does not spell out."""

import json

import pytest

from core.cli import main
from core.domain.recipe_catalog import default_config, set_path
from core.errors import InvalidInput
from core.schema.training_config import config_keys


def test_every_schema_key_can_be_set_on_the_tiny_config():
    config = default_config("gpt-neo", "tiny")
    assert "path" not in config["data"]  # the YAML lacks it; the schema has it
    for section in ("", *[k for k in config_keys("") if config_keys(k) is not None]):
        for key in config_keys(section):
            if config_keys(f"{section}.{key}".strip(".")) is None:  # a value, not a section
                set_path(config, f"{section}.{key}".strip("."), "null")
    assert config["data"]["path"] is None and config["data"]["eval_path"] is None
    set_path(config, "data.path", "/data/c4")
    assert config["data"]["path"] == "/data/c4"


@pytest.mark.parametrize("dotted,hint", [("data.nope", "keys under data: "), ("optim.lr.x", "optim.lr is a value"),
                                         ("nope", "keys under the config root: ")])
def test_a_key_outside_the_schema_is_refused_with_the_keys_there(dotted, hint):
    config = default_config("gpt-neo", "tiny")
    before = json.dumps(config, sort_keys=True)
    with pytest.raises(InvalidInput) as exc:
        set_path(config, dotted, "1")
    assert f"no config key {dotted!r}" in str(exc.value) and hint in str(exc.value)
    assert json.dumps(config, sort_keys=True) == before


def test_deploy_dry_run_takes_data_path_on_tiny(geotrain_home, capsys):
    code = main(["workspaces", "deploy", "distributed-training", "--cluster", "local", "--size", "tiny",
                 "--set", "data.source=c4", "--set", "data.path=/srv/pydoc", "--dry-run"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "/srv/pydoc" in out.out
