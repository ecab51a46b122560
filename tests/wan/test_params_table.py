"""recipes/params.yaml (what the planner reads) matches the models recipes actually build."""

import yaml

from recipes.catalog import MODEL_SIZES
from recipes.param_counts import PARAMS_PATH, count


def test_every_catalog_size_has_a_count_and_small_ones_recount_equal():
    table = yaml.safe_load(PARAMS_PATH.read_text())
    missing = [f"{m}/{s}" for m, sizes in MODEL_SIZES.items() for s in sizes if s not in table.get(m, {})]
    assert missing == [], "run `python -m recipes.param_counts --write`"
    for model, sizes in MODEL_SIZES.items():
        assert table[model]["tiny"] == count(model, "tiny"), f"{model}/tiny is stale in params.yaml"
    assert table["gpt-neo"]["125m"] == count("gpt-neo", "125m")
