"""Which GPU a worker computes on (pure: no GPU needed to check the rule)."""

from __future__ import annotations

import pytest

from recipes.distributed import gpu_for


def test_each_worker_gets_its_own_gpu_when_there_are_enough():
    assert [gpu_for(r, 4, "auto") for r in range(4)] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert gpu_for(1, 2, "nccl") == "cuda:1"


def test_gloo_workers_share_gpus_round_robin():
    assert [gpu_for(r, 1, "gloo") for r in range(2)] == ["cuda:0", "cuda:0"]
    assert [gpu_for(r, 2, "gloo") for r in range(5)] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"]


@pytest.mark.parametrize("backend", ["auto", "nccl"])
def test_a_worker_without_a_gpu_of_its_own_is_refused_in_one_line_unless_gloo(backend):
    with pytest.raises(SystemExit) as err:
        gpu_for(1, 1, backend)
    message = str(err.value)
    assert "\n" not in message
    assert "worker 1 has no GPU of its own (1 visible)" in message
    assert "dist.backend=gloo" in message


def test_cuda_asked_for_with_no_gpu_visible_says_what_to_do():
    with pytest.raises(SystemExit, match="no GPU is visible: set device=cpu"):
        gpu_for(0, 0, "gloo")
