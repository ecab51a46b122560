"""Quantizers, error feedback, DeMo encoding and the outer step, checked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from recipes.algorithms.demo import DctTopKCodec, dct_matrix, pack_bits, unpack_bits
from recipes.algorithms.diloco import nesterov_outer_step
from recipes.compression import FP4_VALUES, BlockCodec, ErrorFeedback, RotatedCodec, hadamard


@pytest.mark.parametrize("bits,rel_bound", [(8, 2 ** -4), (4, 0.25)])
def test_block_codec_round_trip_error_is_bounded_per_block(bits, rel_bound):
    torch.manual_seed(0)
    x = torch.randn(1000) * torch.logspace(-3, 2, 1000)  # blocks of very different scales
    codec = BlockCodec(bits, block=64)
    y = codec.decode(codec.encode(x), x.numel())
    blocks = torch.nn.functional.pad(x, (0, 24)).view(-1, 64).abs().amax(dim=1)
    bound = blocks.repeat_interleave(64)[:1000] * rel_bound
    assert ((y - x).abs() <= bound + 1e-12).all()


def test_an_empty_piece_encodes_to_nothing():
    """A hierarchical shard cut finer than a block can leave a member an empty piece."""
    for bits in (8, 4, 1):
        codec = BlockCodec(bits, 1024)
        assert codec.encode(torch.empty(0)).numel() == codec.payload_bytes(0) == 0
        assert codec.decode(codec.encode(torch.empty(0)), 0).numel() == 0


def test_one_bit_codec_sends_signs_scaled_by_mean_magnitude():
    x = torch.tensor([3.0, -1.0, 2.0, -2.0, 0.5, -0.5, 1.0, -4.0])
    codec = BlockCodec(1, 8)
    payload = codec.encode(x)
    assert payload.numel() == 1 + 4
    assert torch.equal(codec.decode(payload, 8), torch.sign(x) * x.abs().mean())


def test_fp4_represents_its_grid_exactly_and_packs_two_codes_per_byte():
    grid = torch.cat([FP4_VALUES, -FP4_VALUES[1:]])
    x = torch.cat([grid, torch.zeros(128 - grid.numel())])
    codec = BlockCodec(4, block=128)
    payload = codec.encode(x)
    assert payload.dtype == torch.uint8
    assert payload.numel() == 128 // 2 + 4
    assert torch.equal(codec.decode(payload, 128), x)


@pytest.mark.parametrize("bits,numel,block", [(4, 1000, 128), (4, 128 * 7, 128), (8, 1000, 128), (4, 3, 2),
                                             (1, 1000, 128), (1, 13, 8)])
def test_payload_sizes_are_exact(bits, numel, block):
    codec = BlockCodec(bits, block)
    blocks = math.ceil(numel / block)
    expected = math.ceil(numel * bits / 8) + 4 * blocks
    assert codec.payload_bytes(numel) == expected == codec.encode(torch.randn(numel)).numel()
    if bits == 4:  # the wire-size target: <= 1.02x the packed format (P/2 bytes + scales)
        assert expected <= 1.02 * (numel / 2 + 4 * blocks) + 1


@pytest.mark.parametrize("bits", [8, 4, 1])
def test_denormal_and_zero_blocks_decode_finite(bits):
    """Regression: a block whose absmax is denormal made a zero scale and NaN on the wire."""
    x = torch.cat([torch.full((64,), 1e-40), torch.zeros(64), torch.tensor([1e-44] * 64)])
    codec = BlockCodec(bits, 64)
    y = codec.decode(codec.encode(x), x.numel())
    assert torch.isfinite(y).all()
    assert (y - x).abs().max() < 1e-30


def test_fp8_saturates_nothing_because_scales_map_absmax_to_448():
    x = torch.tensor([1e6, -3e5, 1.0, 0.0] * 32)
    codec = BlockCodec(8, 128)
    y = codec.decode(codec.encode(x), x.numel())
    assert y.abs().max() == pytest.approx(1e6, rel=0.07)


@pytest.mark.parametrize("bits", [8, 4, 1])
def test_error_feedback_sums_to_the_input_over_steps(bits):
    torch.manual_seed(1)
    codec = BlockCodec(bits, 32)
    ef = ErrorFeedback(100)
    inputs = [torch.randn(100) for _ in range(20)]
    decoded = [ef.compress(x, codec)[1] for x in inputs]
    total_in, total_out = torch.stack(inputs).sum(0), torch.stack(decoded).sum(0)
    assert torch.allclose(total_out + ef.residual, total_in, atol=1e-4)
    # and the residual stays bounded (it does not grow with the number of steps)
    assert ef.residual.abs().max() < 3.0


def test_error_feedback_off_keeps_no_residual():
    ef = ErrorFeedback(10, enabled=False)
    payload, decoded = ef.compress(torch.ones(10), BlockCodec(4, 2))
    assert ef.residual is None and torch.allclose(decoded, torch.ones(10))


def test_bit_packing_round_trips_and_is_compact():
    values = torch.randint(0, 64, (1001,))
    packed = pack_bits(values, 6)
    assert packed.numel() == math.ceil(1001 * 6 / 8)
    assert torch.equal(unpack_bits(packed, 6, 1001), values)


def test_dct_matrix_is_orthonormal():
    d = dct_matrix(64)
    assert torch.allclose(d @ d.T, torch.eye(64), atol=1e-5)


def test_dct_topk_keeps_the_largest_coefficients_and_sends_few_bytes():
    codec = DctTopKCodec(numel=640, chunk=64, topk=4)
    coeffs = torch.zeros(10, 64)
    coeffs[:, [3, 10, 20, 40]] = torch.tensor([5.0, -4.0, 3.0, 2.0])
    coeffs[:, 50] = 0.1  # dropped
    x = codec.from_coefficients(coeffs)
    payload, sent = codec.encode(x)
    assert payload.numel() == codec.payload_bytes() == math.ceil(40 * 6 / 8) + 40 + 4
    assert torch.allclose(codec.decode(payload), sent)
    expected = coeffs.clone()
    expected[:, 50] = 0
    assert torch.allclose(codec.to_coefficients(sent), expected, rtol=2 ** -4, atol=1e-4)  # fp8 values
    assert payload.numel() * 8 / 640 < 1.0  # under one bit per parameter


def test_value_topk_keeps_the_largest_values_themselves():
    """`demo.transform: none` (SparseLoCo-like): top-k of each chunk's values, no DCT."""
    codec = DctTopKCodec(numel=16, chunk=8, topk=2, value_bits=1, value_block=8, transform="none")
    x = torch.tensor([0.1, -3.0, 0.2, 0.0, 2.0, 0.3, -0.1, 0.0, 5.0, 0.0, 0.0, -5.0, 1.0, 1.0, 0.0, 0.5])
    payload, sent = codec.encode(x)
    # chunk 0 keeps -3 and 2, chunk 1 keeps 5 and -5; four sent values as signs x their mean |x| = 3.75
    expected = torch.zeros(16)
    expected[[1, 4, 8, 11]] = torch.tensor([-3.75, 3.75, 3.75, -3.75])
    assert torch.equal(sent, expected) and torch.equal(codec.decode(payload), expected)
    assert payload.numel() == codec.payload_bytes() == math.ceil(4 * 3 / 8) + 1 + 4  # 3-bit indices, signs, scale


def test_nesterov_outer_step_matches_hand_computation():
    w, m = torch.tensor([1.0, 2.0]), torch.zeros(2)
    nesterov_outer_step(w, m, torch.tensor([0.5, -1.0]), lr=0.7, mu=0.9)
    # m = 0.9*0 + g = g; update = g + 0.9*m = 1.9 g; w = w - 0.7*1.9*g
    assert torch.allclose(m, torch.tensor([0.5, -1.0]))
    assert torch.allclose(w, torch.tensor([1.0 - 0.665, 2.0 + 1.33]))
    nesterov_outer_step(w, m, torch.tensor([0.5, -1.0]), lr=0.7, mu=0.9)
    # m = 0.9*g + g = 1.9 g; update = g + 0.9*1.9 g = 2.71 g
    assert torch.allclose(m, torch.tensor([0.95, -1.9]))
    assert torch.allclose(w, torch.tensor([0.335 - 0.7 * 2.71 * 0.5, 3.33 + 0.7 * 2.71]))


def test_nesterov_matches_torch_sgd():
    torch.manual_seed(2)
    p = torch.nn.Parameter(torch.randn(5))
    sgd = torch.optim.SGD([p], lr=0.7, momentum=0.9, nesterov=True)
    w, m = p.detach().clone(), torch.zeros(5)
    for _ in range(3):
        g = torch.randn(5)
        p.grad = g.clone()
        sgd.step()
        nesterov_outer_step(w, m, g, 0.7, 0.9)
    assert torch.allclose(w, p.detach(), atol=1e-6)


def test_hadamard_matches_the_sylvester_matrix_and_is_its_own_inverse():
    h4 = torch.tensor([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]], dtype=torch.float32) / 2
    x = torch.tensor([[1.0, 0.0, 0.0, 0.0], [3.0, -1.0, 2.0, 5.0]])
    assert torch.allclose(hadamard(x), x @ h4.T)
    assert torch.equal(hadamard(x)[0], torch.full((4,), 0.5))  # a spike spreads evenly
    y = torch.randn(3, 1024)
    assert torch.allclose(hadamard(hadamard(y)), y, atol=1e-5)
    assert torch.allclose(hadamard(y, rows_at_once=2), hadamard(y))  # a big model goes a few rows at a time


def test_rotated_one_bit_codec_fits_a_block_with_outliers_better():
    torch.manual_seed(1)
    x = torch.randn(2048) * 0.01
    x[::97] = 3.0  # a few large values in every block: one scale cannot fit both kinds
    plain, rotated = BlockCodec(1, 1024), RotatedCodec(BlockCodec(1, 1024), seed=5)

    def error(codec):
        return ((codec.decode(codec.encode(x), x.numel()) - x).norm() / x.norm()).item()
    assert error(rotated) < 0.7 * error(plain)
    assert rotated.payload_bytes(2048) == plain.payload_bytes(2048) == rotated.encode(x).numel()
    y = torch.randn(2500)  # two whole blocks turn; the last 452 values go as they are, in as many bytes
    assert rotated.encode(y).numel() == rotated.payload_bytes(2500) == plain.payload_bytes(2500)
    assert torch.equal(rotated.decode(rotated.encode(y), 2500)[2048:], plain.decode(plain.encode(y), 2500)[2048:])
    again = RotatedCodec(BlockCodec(1, 1024), seed=5)  # another rank decodes with the same rotation
    assert torch.equal(again.decode(rotated.encode(x), 2048), rotated.decode(rotated.encode(x), 2048))
    with pytest.raises(ValueError, match="power of two"):
        RotatedCodec(BlockCodec(1, 96))
