"""The contract core relies on: config check/catalog CLIs and the 2-worker torchrun entry."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from tests.recipes.conftest import REPO, read_metrics, recipe_env, run_torchrun

CHECK = [sys.executable, "-m", "recipes.config"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CHECK, *args], cwd=REPO, env=recipe_env(), capture_output=True, text=True)


def test_check_valid_config_is_torch_free(tiny_gpt):
    res = _cli("check", str(tiny_gpt), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout) == []
    probe = subprocess.run([sys.executable, "-c", "import sys, recipes.config as c; "
                            "c.main(['catalog', '--json']); print('torch' in sys.modules)"],
                           cwd=REPO, env=recipe_env(), capture_output=True, text=True)
    assert probe.stdout.strip().splitlines()[-1] == "False"


def test_check_reports_every_error_with_dotted_paths(tmp_path, tiny_gpt):
    data = yaml.safe_load(tiny_gpt.read_text())
    data["optim"]["lr"] = "abc"
    data["optim"]["bogus"] = 1
    data["gradient_compression"] = "extreme"
    data["steps"] = "many"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    res = _cli("check", str(bad), "--json")
    assert res.returncode == 2
    errors = {e["path"]: e for e in json.loads(res.stdout)}
    assert errors["optim.lr"]["expected"] == "a float"
    assert errors["optim.lr"]["found"] == "'abc'"
    assert "optim.bogus" in errors and "steps" in errors
    assert all({"path", "expected", "found", "message"} <= set(e) for e in errors.values())
    plain = _cli("check", str(bad))
    assert plain.returncode == 2 and "optim.lr" in plain.stdout


def test_check_rejects_unknown_model_size_and_preset(tmp_path, tiny_gpt):
    for key, value in [("model", "gpt-5"), ("size", "huge"), ("gradient_compression", "max")]:
        data = yaml.safe_load(tiny_gpt.read_text())
        data[key] = value
        bad = tmp_path / f"{key}.yaml"
        bad.write_text(yaml.safe_dump(data))
        res = _cli("check", str(bad), "--json")
        assert res.returncode == 2
        assert [e["path"] for e in json.loads(res.stdout)] == [key]


def test_catalog_lists_models_sizes_and_presets():
    res = _cli("catalog", "--json")
    assert res.returncode == 0
    cat = json.loads(res.stdout)
    assert set(cat["models"]) == {"gpt-neo", "gpt-neo-x", "gcn", "resnet50", "resnet101", "wav2vec2"}
    assert all("tiny" in sizes for sizes in cat["models"].values())
    assert cat["presets"] == ["none", "low", "medium", "high", "ultra"]


def test_two_workers_train_tiny_gpt_neo_with_diloco(tmp_path, tiny_gpt):
    out = tmp_path / "run"
    res = run_torchrun(tiny_gpt, [f"out_dir={out}"])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for rank in (0, 1):
        assert f"[rank {rank}] step 200/200 loss" in res.stdout
        assert f"[rank {rank}] done" in res.stdout
    metrics = read_metrics(out)
    steps = [m for m in metrics if "eval_loss" not in m]
    assert [m["step"] for m in steps] == list(range(10, 201, 10))
    assert all({"step", "loss", "bytes_sent", "outer_step", "time"} <= set(m) for m in metrics)
    assert steps[-1]["outer_step"] == 200 // 12  # the default preset, medium, syncs every 12 steps
    assert steps[-1]["bytes_sent"] > 0
    assert steps[-1]["loss"] < steps[0]["loss"]
    assert (out / "wandb").is_dir()
