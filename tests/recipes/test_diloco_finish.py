"""DiLoCo's last outer step (a partial phase, or a whole phase at `final_step`) against hand-computed
examples on two real gloo ranks."""

from __future__ import annotations

import pytest
import torch

from recipes.algorithms.diloco import DiLoCo
from recipes.algorithms.exchange import FullPrecisionExchange
from recipes.distributed import Wire
from tests.recipes.conftest import gloo_ranks, two_gloo_ranks


class One(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2))


def _diloco(final_step: int | None, overlap: bool = False, world: int = 2) -> tuple[One, DiLoCo, Wire]:
    model, wire = One(), Wire(world)
    algo = DiLoCo(model, FullPrecisionExchange(2, 32, wire), inner_steps=4, outer_lr=0.5, outer_momentum=0.5,
                  final_step=final_step, overlap=overlap)
    return model, algo, wire


def _train(rank: int, model: One, algo: DiLoCo, first: int, last: int, finish: bool = True) -> list:
    seen = []
    with torch.no_grad():
        for step in range(first, last + 1):  # the "inner step": rank r moves every value by (r+1)*step
            model.w.add_((rank + 1) * step)
            if algo.after_optimizer_step(step):
                seen.append(model.w.tolist())
        if finish:
            algo.finish(last)
    return seen


def _run(rank: int, steps: int, final_step: int | None, overlap: bool = False, world: int = 2) -> list:
    model, algo, wire = _diloco(final_step, overlap, world)
    seen = _train(rank, model, algo, 1, steps)
    return [*seen, model.w.tolist(), algo.momentum.tolist(), wire.bytes_sent]


def _rank(rank: int) -> list:
    return _run(rank, 6, final_step=None)  # a last partial phase is the run's last sync without final_step


def _whole_phases(rank: int) -> list:
    return [_run(rank, 8, final_step=8), _run(rank, 8, final_step=None)]


@pytest.mark.timeout(120)
def test_last_partial_phase_steps_without_momentum_look_ahead(tmp_path):
    r0, r1 = two_gloo_ranks(_rank, tmp_path)
    # steps 1-4: progress 10 (rank 0) and 20 (rank 1), mean pseudo-gradient -15. Nesterov: m = -15,
    # w -= 0.5 * (-15 + 0.5 * -15) -> 11.25. Steps 5-6 (the run ends 2 steps into a phase): progress
    # 11 and 22, mean -16.5, applied as a plain outer step: w -= 0.5 * -16.5 -> 19.5 (Nesterov would
    # have gone to 25.5: m = 0.5 * -15 - 16.5 = -24, w -= 0.5 * (-16.5 + 0.5 * -24)).
    assert r0[0] == r1[0] == [11.25, 11.25]
    assert r0[1] == r1[1] == [19.5, 19.5]
    assert r0[2] == r1[2] == [-24.0, -24.0]  # the momentum takes the last phase as usual: 0.5 * -15 - 16.5
    assert r0[3] == r1[3] == 2 * 8  # two fp32 all-reduces of 2 values


@pytest.mark.timeout(120)
def test_a_run_ending_on_a_whole_phase_steps_without_look_ahead_at_final_step(tmp_path):
    r0, r1 = two_gloo_ranks(_whole_phases, tmp_path)
    assert r0 == r1  # the ranks agree, with and without final_step
    ended, open_ended = r0
    # step 4 as above: 11.25, m = -15. Steps 5-8 (a whole phase, the run's last): progress 26 and 52,
    # mean pseudo-gradient -39, a plain outer step: w -= 0.5 * -39 -> 30.75; finish(8) adds nothing.
    # The momentum takes the last phase as an ordinary sync would: 0.5 * -15 - 39 = -46.5.
    assert ended[0] == [11.25, 11.25]
    assert ended[1] == ended[2] == [30.75, 30.75]
    assert ended[3] == [-46.5, -46.5]
    assert ended[4] == 2 * 8
    # with no final_step the sync at step 8 is an ordinary one: m = 0.5 * -15 - 39 = -46.5,
    # w -= 0.5 * (-39 + 0.5 * -46.5) -> 42.375
    assert open_ended[1] == open_ended[2] == [42.375, 42.375]
    assert open_ended[3] == [-46.5, -46.5]
    assert open_ended[4] == 2 * 8


def _overlapped(rank: int) -> list:
    return _run(rank, 8, final_step=8, overlap=True)


@pytest.mark.timeout(120)
def test_an_overlapped_run_takes_eager_steps_and_ends_equal_without_look_ahead(tmp_path):
    r0, r1 = two_gloo_ranks(_overlapped, tmp_path)
    # Step 4: deltas -10 and -20 start on the wire; nothing has landed. Each rank's eager step takes its
    # own delta for its share (1/2) of the average: input -5 (rank 0) and -10 (rank 1), m = input,
    # w = -0.5 * (input + 0.5 * input) -> 3.75 and 7.5. The shared weights stay at 0.
    assert r0[0] == [3.75, 3.75] and r1[0] == [7.5, 7.5]
    # Step 8: deltas -26 and -52 start; the average of step 4 (-15) lands, and the shared weights
    # replay the mean of the ranks' eager steps: input 0.5 * -15, m = -7.5, w = -0.5 * -11.25 = 5.625.
    # Eager steps on from there: input 0.5 * -15 + 0.5 * delta = -20.5 and -33.5, m = 0.5 * -7.5 + input,
    # w = 5.625 - 0.5 * (input + 0.5 * m) -> 21.9375 and 31.6875.
    assert r0[1] == [21.9375, 21.9375] and r1[1] == [31.6875, 31.6875]
    # finish(8): the last average (-39) lands with what the shared weights still owe of step 4's
    # (0.5 * -15), as the run's last outer step without look-ahead: input -46.5, m = 0.5 * -7.5 - 46.5,
    # w = 5.625 + 0.5 * 46.5 = 28.875, on both ranks. The inputs add up to the averages, -15 - 39.
    assert r0[2] == r1[2] == [28.875, 28.875]
    assert r0[3] == r1[3] == [-50.25, -50.25]
    assert r0[4] == r1[4] == 2 * 8


def _overlapped_three(rank: int) -> list:
    return _run(rank, 8, final_step=8, overlap=True, world=3)


@pytest.mark.timeout(120)
def test_eager_steps_take_one_mth_of_the_own_delta_and_the_rest_of_the_landed_average(tmp_path):
    """Three ranks, so that 1/M and 1 - 1/M differ (with two a swap of the shares would pass)."""
    ranks = gloo_ranks(_overlapped_three, tmp_path, 3)
    # Step 4: deltas -10, -20, -30 start (average -20). Eager input = own delta / 3; from 0,
    # w = -0.5 * 1.5 * input -> 2.5, 5, 7.5.
    assert [r[0] for r in ranks] == [[2.5, 2.5], [5.0, 5.0], [7.5, 7.5]]
    # Step 8: deltas -26, -52, -78 start (average -52); -20 lands: the shared weights take 1/3 of it,
    # input -20/3, m = -20/3, w = -0.5 * 1.5 * -20/3 = 5. Eager input = 2/3 * -20 + delta / 3 = -22,
    # -92/3, -118/3; m = 0.5 * -20/3 + input; w = 5 - 0.5 * (input + 0.5 * m) -> 67/3, 173/6, 106/3.
    assert [r[1][0] for r in ranks] == pytest.approx([67 / 3, 173 / 6, 106 / 3], rel=1e-6)
    # finish(8): input 2/3 * -20 + -52 = -196/3 (the inputs add up to -20 - 52), no look-ahead:
    # w = 5 + 0.5 * 196/3 = 113/3, m = 0.5 * -20/3 - 196/3 = -206/3, equal on every rank.
    assert ranks[0][2] == ranks[1][2] == ranks[2][2] and ranks[0][2][0] == pytest.approx(113 / 3, rel=1e-6)
    assert ranks[0][3] == ranks[1][3] == ranks[2][3] and ranks[0][3][0] == pytest.approx(-206 / 3, rel=1e-6)


def _overlap_then_plain(rank: int) -> list:
    """An overlapped run checkpointed after step 4 (its first exchange in flight), resumed without overlap."""
    model, algo, _ = _diloco(final_step=8, overlap=True)
    _train(rank, model, algo, 1, 4, finish=False)
    assert algo.pending is not None  # in flight when the checkpoint is taken
    saved_model = {k: v.clone() for k, v in model.state_dict().items()}
    saved_algo = {k: v.clone() if torch.is_tensor(v) else v for k, v in algo.state_dict().items()}
    algo.exchange.finish(algo.pending)  # the first run's exchange completes on the group before the resume
    resumed, plain, wire = _diloco(final_step=8)
    resumed.load_state_dict(saved_model)
    plain.load_state_dict(saved_algo)
    _train(rank, resumed, plain, 5, 8)
    return [resumed.w.tolist(), plain.momentum.tolist(), plain.pending is None]


@pytest.mark.timeout(120)
def test_an_exchange_left_in_flight_lands_when_the_run_resumes_without_overlap(tmp_path):
    r0, r1 = two_gloo_ranks(_overlap_then_plain, tmp_path)
    # the re-sent exchange of step 4 (-15) lands at the sync of step 8 before that sync's own
    # average (-39): m = -15, w = 11.25 as in a plain run, then the run's last step to 30.75 with
    # m = -46.5, where the plain 8-step run ends
    assert r0 == r1 == [[30.75, 30.75], [-46.5, -46.5], True]


def _extended(rank: int) -> list:
    """A run of 8 steps that ended, resumed with 12 steps (as train.py restores a checkpoint: the
    model first, then the algorithm), against a run of 12 steps from the start; and the same
    checkpoint restored for its own 8 steps again."""
    model, algo, _ = _diloco(final_step=8)
    _train(rank, model, algo, 1, 8)
    saved_model, saved_algo = model.state_dict(), {k: v.clone() if torch.is_tensor(v) else v
                                                    for k, v in algo.state_dict().items()}
    again, again_algo, _ = _diloco(final_step=8)
    again.load_state_dict(saved_model)
    again_algo.load_state_dict(saved_algo)
    longer, longer_algo, _ = _diloco(final_step=12)
    longer.load_state_dict(saved_model)
    longer_algo.load_state_dict(saved_algo)
    resumed_at_8 = longer.w.tolist()
    _train(rank, longer, longer_algo, 9, 12)
    straight, straight_algo, _ = _diloco(final_step=12)
    _train(rank, straight, straight_algo, 1, 12)
    return [saved_algo["withheld_at"], again.w.tolist(), again_algo.withheld_at, resumed_at_8,
            longer.w.tolist(), longer_algo.momentum.tolist(), straight.w.tolist(), straight_algo.momentum.tolist()]


@pytest.mark.timeout(120)
def test_a_finished_run_resumed_with_more_steps_goes_on_as_if_it_had_never_ended(tmp_path):
    r0, r1 = two_gloo_ranks(_extended, tmp_path)
    assert r0 == r1
    withheld_at, again, again_withheld, resumed_at_8, longer, longer_m, straight, straight_m = r0
    assert withheld_at == 8
    assert again == [30.75, 30.75] and again_withheld == 8  # restored for the same 8 steps: as it ended
    # resumed with 12 steps, the withheld look-ahead comes first: 30.75 - 0.5 * 0.5 * -46.5 = 42.375,
    # where the 12-step run stood after its ordinary sync at step 8
    assert resumed_at_8 == [42.375, 42.375]
    assert longer == straight and longer_m == straight_m
    # steps 9-12: progress 42 and 84, mean -63; a plain last step from 42.375: 42.375 + 0.5 * 63
    assert straight == [73.875, 73.875]
    assert straight_m == [0.5 * -46.5 - 63] * 2


def test_the_built_algorithm_knows_the_runs_last_step():
    from recipes.algorithms import build_algorithm
    from recipes.config import parse_config, resolve_compression
    from recipes.models import build_model

    cfg = parse_config({"model": "gpt-neo", "size": "tiny", "steps": 37, "out_dir": "unused",
                        "gradient_compression": "high"})
    model, _ = build_model("gpt-neo", "tiny")
    assert build_algorithm(model, resolve_compression(cfg), cfg, Wire(1)).final_step == 37


def test_a_worker_that_joined_after_the_last_sync_does_not_sync_again():
    """Elastic: a worker that rejoins after the others' last (partial-phase) sync gets their weights,
    momentum and `withheld_at` (recipes.elastic), so its finish() must not run a sync of its own."""
    model, wire = One(), Wire(1)
    algo = DiLoCo(model, FullPrecisionExchange(2, 32, wire), inner_steps=4, outer_lr=0.5, outer_momentum=0.5,
                  final_step=6)
    algo.global_flat, algo.momentum = torch.tensor([19.5, 19.5]), torch.tensor([-24.0, -24.0])
    algo.anchor, algo.outer_step, algo.withheld_at = algo.global_flat.clone(), 2, 6
    algo._write_params(algo.global_flat)
    algo.finish(6)
    assert model.w.tolist() == [19.5, 19.5] and algo.momentum.tolist() == [-24.0, -24.0]
    assert algo.outer_step == 2 and wire.bytes_sent == 0
