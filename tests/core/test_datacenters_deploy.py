"""`geotrain workspaces deploy --datacenters K` on the local cluster: hierarchical DiLoCo as one
torchrun group; splits that cannot be even are refused in one line, state unchanged."""

import yaml

from core.cli import main
from tests.core.test_bad_input import _deploy, _state


def test_datacenters_dry_run_plans_one_group_split_evenly(geotrain_home, capsys):
    assert main(_deploy("--workers", "4", "--datacenters", "2", "--gradient-compression", "high", "--dry-run")) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert "4 workers, 2 datacenters x 2 on this machine" in first and first.endswith("group)")
    assert "one process per worker (RANK 0-3)" in out and "recipes.train" in out
    config = yaml.safe_load(out[out.index("# resolved config:") + len("# resolved config:"):])
    assert config["datacenters"] == 2 and config["gradient_compression"] == "high"


def test_datacenters_that_do_not_divide_the_workers_are_refused(geotrain_home, capsys):
    before = _state(geotrain_home)
    assert main(_deploy("--workers", "3", "--datacenters", "2")) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err]
    assert "3 workers do not split evenly into 2 datacenters" in err and "--workers a multiple of 2" in err
    assert main(_deploy("--datacenters", "0")) == 2
    assert "config.datacenters" in capsys.readouterr().err
    assert _state(geotrain_home) == before
