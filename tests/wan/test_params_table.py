"""What the planner reads matches what recipes do: params.yaml vs the built models, payloads vs the codecs."""

import yaml

from core.planner import wan_what_if as planner

from core.domain import recipe_catalog
from recipes.catalog import MODEL_SIZES
from recipes.compression import BlockCodec, RotatedCodec
from recipes.bench.param_counts import PARAMS_PATH, count


def test_planner_payloads_equal_the_recipe_codecs():
    for name, preset in recipe_catalog.presets().items():
        if not preset.get("block") or preset.get("density", 1.0) < 1.0:
            continue
        for numel in (1000, 461_568, 1_315_575_808):
            codec = BlockCodec(preset["bits"], preset["block"])
            codec = RotatedCodec(codec) if preset.get("rotate") else codec
            assert planner.exchange_for(preset, numel).payload_bytes == codec.payload_bytes(numel), name


def test_every_catalog_size_has_a_count_and_small_ones_recount_equal():
    table = yaml.safe_load(PARAMS_PATH.read_text())
    missing = [f"{m}/{s}" for m, sizes in MODEL_SIZES.items() for s in sizes if s not in table.get(m, {})]
    assert missing == [], "run `python -m recipes.bench.param_counts --write`"
    for model, sizes in MODEL_SIZES.items():
        assert table[model]["tiny"] == count(model, "tiny"), f"{model}/tiny is stale in params.yaml"
    assert table["gpt-neo"]["125m"] == count("gpt-neo", "125m")
