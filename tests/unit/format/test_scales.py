"""The E8M0 scale rule: amax/448 rounded up to a power of two, byte = biased exponent."""

import math

import pytest
import torch

from megatron_mxfp8_moe.format.scales import (
    dequant_multiplier_from_bytes,
    quant_multiplier_from_amax,
    scale_bytes_from_amax,
)


def _expected_byte(amax: float) -> int:
    """Independent statement of the rule on exact rationals: smallest 2**e >= fl32(amax/448)."""
    if amax == 0:
        return 0
    quotient = torch.tensor(amax, dtype=torch.float32) / 448.0  # the rule divides in float32
    mantissa, exponent = math.frexp(float(quotient))  # quotient = mantissa * 2**exponent, mantissa in [0.5, 1)
    e = exponent - 1 if mantissa == 0.5 else exponent
    return max(e + 127, 1 if float(quotient) > 0 else 0)


@pytest.mark.parametrize(
    "amax",
    [448.0, 224.0, 1.0, 1.75 * 448, 1.7499 * 448, 1.7501 * 448, 448.0 * 2**-20, 448.0 * 2**20, 3e38, 1e-30,
     2.0**-126, 2.0**-133, 449.0, 447.0],
)
def test_scale_byte_matches_the_rule(amax):
    got = int(scale_bytes_from_amax(torch.tensor([amax], dtype=torch.float32))[0])
    assert got == _expected_byte(amax)


def test_exact_powers_are_not_rounded_up():
    amax = torch.tensor([448.0 * 2.0**k for k in range(-20, 21)], dtype=torch.float32)
    assert torch.equal(scale_bytes_from_amax(amax).to(torch.int64), torch.arange(-20, 21) + 127)


def test_significand_just_above_one_rounds_up():
    # amax/448 = 2**-3 * (1 + 2**-10) exactly: just above a power of two, so the next power is taken.
    amax = torch.tensor([448.0 * 2.0**-3 * (1 + 2.0**-10)], dtype=torch.float32)
    assert float(amax / 448.0) == 2.0**-3 * (1 + 2.0**-10)
    assert int(scale_bytes_from_amax(amax)[0]) == 127 - 3 + 1


def test_zero_block_gets_byte_zero_and_multiplier_zero():
    assert int(scale_bytes_from_amax(torch.zeros(1))[0]) == 0
    assert float(quant_multiplier_from_amax(torch.zeros(1))[0]) == 0.0


def test_multiplier_keeps_block_max_within_e4m3():
    amax = torch.rand(10_000) * torch.exp2(torch.randint(-60, 60, (10_000,)).float())
    scaled = amax * quant_multiplier_from_amax(amax)
    assert float(scaled.max()) <= 448.0
    assert float(scaled.min()) > 224.0 * (1 - 1e-6)  # rounding up loses at most one binade


def test_dequant_multiplier_is_two_to_the_biased_exponent():
    bytes_ = torch.tensor([1, 100, 127, 128, 200, 254], dtype=torch.uint8)
    expected = torch.tensor([2.0 ** (b - 127) for b in bytes_.tolist()])
    assert torch.equal(dequant_multiplier_from_bytes(bytes_), expected)
