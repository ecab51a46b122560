"""Ranks agree on the newest checkpoint they all hold, over two real gloo ranks, exchanging
step numbers as tensors (nothing a peer sends is unpickled)."""

from __future__ import annotations

import pytest

from recipes import checkpoint
from tests.recipes.conftest import two_gloo_ranks

CASES = [  # (rank 0's complete steps, rank 1's) -> the common newest
    (([10, 20, 30], [10, 20]), 20),
    (([], [10]), None),
    (([5], [7]), None),
    (([1, 2, 3, 4], [4, 3, 2, 1]), 4),
]


def _rank(rank: int) -> list:
    return [checkpoint.common_step(max(steps[rank], default=None), steps[rank], 2) for steps, _ in CASES]


@pytest.mark.timeout(120)
def test_ranks_agree_on_the_newest_common_checkpoint(tmp_path):
    expected = [common for _, common in CASES]
    for agreed in two_gloo_ranks(_rank, tmp_path):
        assert agreed == expected
