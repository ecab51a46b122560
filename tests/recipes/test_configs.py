"""Every catalog entry has a complete config that checks, and the preset table has what core reads."""

from __future__ import annotations

import pytest

from recipes.catalog import catalog
from recipes.config import (CONFIGS_DIR, PRESET_BETA1, ConfigError, load_config, load_presets, parse_config,
                            preset_by_beta1, preset_outer_lr, resolve_compression)

ALL = [(m, s) for m, sizes in catalog().items() for s in sizes]
# what recipes.config.resolve_compression and the planner read from a preset (presets.yaml's header says each)
KNOWN_PRESET_KEYS = {"algorithm", "inner_steps", "inner_steps_by_beta1", "bits", "block", "rotate", "density",
                     "index_bits", "outer_lr", "outer_lr_by_beta1", "outer_momentum", "overlap_momentum",
                     "fragments", "error_feedback", "chunk", "topk", "description"}


@pytest.mark.parametrize("model,size", ALL)
def test_every_model_size_has_a_valid_config_with_its_command(model, size):
    path = CONFIGS_DIR / model / f"{size}.yaml"
    first = path.read_text().splitlines()[0]
    assert first.startswith("# torchrun") and f"recipes/configs/{model}/{size}.yaml" in first
    cfg = load_config(path)
    assert (cfg.model, cfg.size) == (model, size)


def test_no_config_without_catalog_entry():
    files = {(p.parent.name, p.stem) for p in CONFIGS_DIR.glob("*/*.yaml")}
    assert files == set(ALL)


def test_presets_table_has_what_core_and_planner_read():
    presets = load_presets()
    assert list(presets) == ["none", "low", "medium", "high", "ultra"]
    assert presets["none"]["algorithm"] == "ddp"
    for name, p in presets.items():
        assert p["algorithm"] in ("ddp", "diloco", "demo"), name
        assert isinstance(p["inner_steps"], int) and p["inner_steps"] >= 1
        assert p["bits"] in (32, 16, 8, 4, 1)
        assert isinstance(p["description"], str) and p["description"]
        by_beta1 = p.get("outer_lr_by_beta1", {})
        assert all(isinstance(b, float) and 0 <= b < 1 and b != PRESET_BETA1 and lr > 0  # 0.9 is outer_lr's
                   for b, lr in by_beta1.items()), name
        h_by_beta1 = p.get("inner_steps_by_beta1", {})
        assert all(isinstance(b, float) and 0 <= b < 1 and b != PRESET_BETA1 and isinstance(h, int) and h >= 1
                   for b, h in h_by_beta1.items()), name
        assert set(p) <= KNOWN_PRESET_KEYS, (name, set(p) - KNOWN_PRESET_KEYS)  # a misspelt key would be ignored
    for beta1 in (PRESET_BETA1, 0.5):
        h = [preset_by_beta1(p, "inner_steps", beta1, 1) for p in presets.values()]
        assert h == sorted(h), f"higher presets synchronise less often (beta1 {beta1})"


def test_medium_takes_the_h_measured_best_at_the_runs_beta1():
    """presets.yaml: medium is H=12 at Adam beta1 0.9 (the configs') and H=8 at 0.5 (the text bench's)."""
    base = {"model": "gpt-neo", "size": "tiny", "gradient_compression": "medium"}

    def resolved(*sets):
        comp = resolve_compression(parse_config(base, list(sets)))
        return comp.inner_steps, comp.outer_lr

    assert resolved() == (12, 0.7)
    assert resolved("optim.betas=[0.5,0.95]") == (8, 0.9)
    assert resolved("optim.betas=[0.7,0.95]") == (12, 0.7)  # a tie: the plain values
    assert resolved("optim.betas=[0.5,0.95]", "diloco.inner_steps=20") == (20, 0.9)  # the config's own wins
    assert resolved("optim.betas=[0.5,0.95]", "optim.name=muon") == (12, 0.7)  # tuned with AdamW only
    assert preset_by_beta1({"inner_steps": 40}, "inner_steps", 0.5, 1) == 40  # no table: one H for every beta1


def test_overrides_apply_and_resolve_the_preset():
    base = {"model": "gpt-neo", "size": "tiny", "steps": 10, "out_dir": "x"}
    cfg = parse_config(base, ["gradient_compression=high", "diloco.inner_steps=7", "optim.lr=1e-4"])
    comp = resolve_compression(cfg)
    assert (comp.algorithm, comp.inner_steps, comp.bits) == ("diloco", 7, 1)
    assert cfg.optim.lr == pytest.approx(1e-4)


def test_a_presets_outer_lr_follows_the_inner_beta1_it_was_tuned_at():
    # presets.yaml: low's outer lr is 0.5 at Adam beta1 0.9 and 0.7 at 0.5 (unstable at 0.9)
    base = {"model": "gpt-neo", "size": "tiny", "gradient_compression": "low"}
    low = load_presets()["low"]
    assert (low["outer_lr"], low["outer_lr_by_beta1"]) == (0.5, {0.5: 0.7})

    def outer(*sets):
        return resolve_compression(parse_config(base, list(sets))).outer_lr

    assert outer() == 0.5  # the configs' beta1 0.9
    assert outer("optim.betas=[0.5,0.95]") == 0.7
    assert outer("optim.betas=[0.3,0.95]") == 0.7  # nearest
    assert outer("optim.betas=[0.8,0.95]") == 0.5
    assert outer("optim.betas=[0.7,0.95]") == 0.5  # a tie: the plain outer_lr
    assert outer("optim.betas=[0.5,0.95]", "diloco.outer_lr=0.3") == 0.3  # the config's own wins
    assert outer("optim.betas=[0.5,0.95]", "optim.name=muon") == 0.5  # tuned with AdamW only
    assert preset_outer_lr({"outer_lr": 0.9}, 0.5) == 0.9  # no table: one value for every beta1
    assert preset_outer_lr({}, 0.9) == 0.7  # Compression's default
    two = {"outer_lr": 0.9, "outer_lr_by_beta1": {0.3: 2.0, 0.5: 1.2}}
    assert [preset_outer_lr(two, b) for b in (0.0, 0.39, 0.4, 0.41, 0.7, 0.95)] == [2.0, 2.0, 1.2, 1.2, 0.9, 0.9]


def test_an_hf_repo_is_a_repo_id_matched_in_full():
    """Checkpoints upload to it and its name reaches log lines: a name or namespace/name, nothing else."""
    for good in ("me/run-ckpts", "run_1.v2", "Org-9/x"):
        assert parse_config({"model": "gpt-neo", "size": "tiny"}, [f"checkpoint.hf_repo={good}"]).checkpoint.hf_repo == good
    for bad in ("a/b/c", "me/x\ngeotrain-event {}", " me/x", "me/x\n", "../x", "x" * 97, ""):
        with pytest.raises(ConfigError) as exc:
            parse_config({"model": "gpt-neo", "size": "tiny", "checkpoint": {"hf_repo": bad}})
        assert [e["message"] for e in exc.value.errors] == [
            "checkpoint.hf_repo must be an HF Hub repo id (name or namespace/name: letters, digits, '.', '_', '-'), "
            f"found {bad!r}"], bad


def test_a_list_items_limit_names_the_item():
    # a preset's outer lr follows Adam's beta1, so a beta outside [0, 1) is refused, not picked from
    def said(betas):
        with pytest.raises(ConfigError) as exc:
            parse_config({"model": "gpt-neo", "size": "tiny"}, [f"optim.betas={betas}"])
        return [(e["path"], e["expected"], e["message"]) for e in exc.value.errors]

    assert said("[1.5,0.95]") == [("optim.betas", "a list of floats of 2 values, each < 1",
                                   "optim.betas[0] must be < 1, found 1.5")]
    assert said("[0.5,-0.1]") == [("optim.betas", "a list of floats of 2 values, each ≥ 0",
                                   "optim.betas[1] must be ≥ 0, found -0.1")]
    assert said("[.nan,0.95]")[0][2].startswith("optim.betas[0] must be ")
    assert said("[0.5]") == [("optim.betas", "a list of floats of 2 values", "optim.betas needs 2 values, found [0.5]")]


def test_bad_override_is_reported_not_ignored():
    with pytest.raises(ConfigError) as exc:
        parse_config({"model": "gpt-neo", "size": "tiny"}, ["optim.nope=1", "steps=0"])
    # bounds are part of the schema now, so both problems are reported at once
    assert {e["path"] for e in exc.value.errors} == {"optim.nope", "steps"}
    with pytest.raises(ConfigError) as exc:
        parse_config({"model": "gpt-neo", "size": "tiny"}, ["steps=0"])
    assert [e["path"] for e in exc.value.errors] == ["steps"]


def test_float_from_yaml_exponent_without_dot_and_no_bool_for_numbers():
    # PyYAML (YAML 1.1) reads `3e-4` as a string; the old checker accepted it, so does the schema
    cfg = parse_config({"model": "gpt-neo", "size": "tiny", "optim": {"lr": "3e-4"}})
    assert cfg.optim.lr == pytest.approx(3e-4)
    with pytest.raises(ConfigError) as exc:
        parse_config({"model": "gpt-neo", "size": "tiny", "steps": True, "optim": {"lr": True}})
    assert {e["path"]: e["expected"] for e in exc.value.errors} == {"steps": "an integer", "optim.lr": "a float"}


def test_size_and_data_source_are_checked_against_the_model():
    with pytest.raises(ConfigError) as exc:
        parse_config({"model": "gcn", "size": "125m"})
    assert [e["path"] for e in exc.value.errors] == ["size"] and "choose one of tiny" in exc.value.errors[0]["message"]
    with pytest.raises(ConfigError) as exc:
        parse_config({"model": "gcn", "size": "tiny", "data": {"source": "markov"}})
    assert [e["path"] for e in exc.value.errors] == ["data.source"]


def test_algorithm_and_outer_settings_come_from_the_preset_unless_overridden():
    base = {"model": "gpt-neo", "size": "tiny", "gradient_compression": "ultra"}
    preset = load_presets()["ultra"]
    comp = resolve_compression(parse_config(base))
    assert comp.algorithm == preset["algorithm"]
    assert comp.outer_momentum == preset.get("outer_momentum", 0.9)
    comp = resolve_compression(parse_config(base, ["algorithm=demo", "diloco.outer_momentum=0.5"]))
    assert (comp.algorithm, comp.outer_momentum) == ("demo", 0.5)


def test_an_overlapped_run_takes_the_presets_overlap_momentum_unless_one_is_set():
    from recipes.algorithms import build_algorithm
    from recipes.distributed import Wire
    from recipes.models import build_model

    base = {"model": "gpt-neo", "size": "tiny", "steps": 20, "out_dir": "unused", "gradient_compression": "medium"}
    model, _ = build_model("gpt-neo", "tiny")
    overlapped = parse_config(base, ["diloco.overlap=true"])
    comp = resolve_compression(overlapped)
    assert (comp.outer_momentum, comp.overlap_momentum) == (0.6, 0.4)
    algo = build_algorithm(model, comp, overlapped, Wire(1))
    assert algo.outer_momentum == 0.4
    algo.stop_overlap()  # elastic mode waits for every exchange: plain DiLoCo's momentum again
    assert (algo.overlap, algo.outer_momentum) == (False, 0.6)
    plain = parse_config(base)
    assert build_algorithm(model, resolve_compression(plain), plain, Wire(1)).outer_momentum == 0.6
    mine = parse_config(base, ["diloco.overlap=true", "diloco.outer_momentum=0.7"])
    assert build_algorithm(model, resolve_compression(mine), mine, Wire(1)).outer_momentum == 0.7


def test_ultras_fragments_and_error_feedback_come_from_the_preset_and_its_fragments_give_way_to_overlap():
    from recipes.algorithms import build_algorithm
    from recipes.algorithms.diloco import DiLoCo
    from recipes.algorithms.streaming import StreamingDiLoCo
    from recipes.distributed import Wire
    from recipes.models import build_model

    base = {"model": "gpt-neo", "size": "tiny", "steps": 20, "out_dir": "unused", "gradient_compression": "ultra"}
    comp = resolve_compression(parse_config(base))
    assert (comp.fragments, comp.error_feedback, comp.inner_steps) == (2, False, 205)
    assert resolve_compression(parse_config({**base, "gradient_compression": "high"})).error_feedback is True
    assert resolve_compression(parse_config(base, ["diloco.error_feedback=true"])).error_feedback is True
    model, _ = build_model("gpt-neo", "tiny")
    plain = parse_config(base)
    algo = build_algorithm(model, resolve_compression(plain), plain, Wire(1))
    assert isinstance(algo, StreamingDiLoCo) and len(algo.bounds) == 2 and algo.final_step == 20
    assert not any(e.feedback.enabled for e in algo.exchanges)
    overlapped = parse_config(base, ["diloco.overlap=true"])  # the preset's fragments give way: one exchange
    algo = build_algorithm(model, resolve_compression(overlapped), overlapped, Wire(1))
    assert type(algo) is DiLoCo and algo.overlap and not algo.exchange.feedback.enabled
    mine = parse_config(base, ["diloco.overlap=true", "diloco.fragments=2"])  # asked for both: refused
    with pytest.raises(ValueError, match="diloco.overlap is not available with diloco.fragments > 1"):
        build_algorithm(model, resolve_compression(mine), mine, Wire(1))
    algo = build_algorithm(model, resolve_compression(plain), plain, Wire(1), elastic=True)  # quorum: whole steps
    assert type(algo) is DiLoCo and not algo.exchange.feedback.enabled
    mine = parse_config(base, ["diloco.fragments=2"])
    with pytest.raises(ValueError, match="diloco.fragments is not available in elastic mode"):
        build_algorithm(model, resolve_compression(mine), mine, Wire(1), elastic=True)
    halves = parse_config(base, ["diloco.density=0.5"])  # what a sync leaves out waits in error feedback: refused
    with pytest.raises(ValueError, match="needs error feedback .* set diloco.error_feedback=true"):
        build_algorithm(model, resolve_compression(halves), halves, Wire(1))


def test_rotation_and_subsets_come_from_the_preset_unless_overridden():
    base = {"model": "gpt-neo", "size": "tiny", "gradient_compression": "high"}
    comp = resolve_compression(parse_config(base))
    assert (comp.rotate, comp.density) == (True, 1.0)  # high rotates, sends everything
    comp = resolve_compression(parse_config(base, ["diloco.rotate=false", "diloco.density=0.25"]))
    assert (comp.rotate, comp.density) == (False, 0.25)
    assert resolve_compression(parse_config({**base, "gradient_compression": "low"})).rotate is False
    for bad in ("diloco.density=0", "diloco.density=1.5", "diloco.rotate=sometimes", "demo.transform=fft"):
        with pytest.raises(ConfigError) as exc:
            parse_config(base, [bad])
        assert [e["path"] for e in exc.value.errors] == [bad.split("=")[0]]
