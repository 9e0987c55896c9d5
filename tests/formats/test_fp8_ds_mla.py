"""The host implementation of the fp8_ds_mla slot (sparse_mla.fp8_ds_mla) and the cache-format helpers.

Values are checked against hand-decoded bytes (e4m3fn: sign, 4 exponent bits of bias 7, 3 mantissa bits;
exponent 0 = subnormals of step 2**-9) and against the e4m3 rounding bound: a quantized value differs from
its input by at most half a step, ``|x| * 2**-4`` for normal values and ``scale * 2**-10`` below them.
"""

import re
import struct

import pytest
import torch

from sparse_mla import kv_cache_format
import sparse_mla_testing as testing
from sparse_mla.constants import (
    FP8_DS_MLA_GROUP_SIZE,
    FP8_DS_MLA_NUM_SCALES,
    FP8_DS_MLA_ROPE_OFFSET,
    FP8_DS_MLA_SCALE_OFFSET,
    FP8_DS_MLA_SLOT_BYTES,
    FP8_E4M3_MAX,
    KV_LORA_RANK,
    QK_ROPE_HEAD_DIM,
)
from sparse_mla.fp8_ds_mla import FLT_MIN, dequantize_cache, group_scales, quantize_slots

CPU = torch.device("cpu")


def _tokens(gen, num_tokens):
    kv_c = torch.randn(num_tokens, KV_LORA_RANK, generator=gen).to(torch.bfloat16)
    k_pe = torch.randn(num_tokens, QK_ROPE_HEAD_DIM, generator=gen).to(torch.bfloat16)
    return kv_c, k_pe


def test_layout_constants():
    assert FP8_DS_MLA_SCALE_OFFSET == KV_LORA_RANK == FP8_DS_MLA_NUM_SCALES * FP8_DS_MLA_GROUP_SIZE
    assert FP8_DS_MLA_ROPE_OFFSET == FP8_DS_MLA_SCALE_OFFSET + 4 * FP8_DS_MLA_NUM_SCALES == 528
    assert FP8_DS_MLA_ROPE_OFFSET + 2 * QK_ROPE_HEAD_DIM == FP8_DS_MLA_SLOT_BYTES == 656
    assert FP8_E4M3_MAX == torch.finfo(torch.float8_e4m3fn).max == 448.0


def test_hand_decoded_slot():
    """One slot whose every byte is known: group 0 has amax 448, so its scale is exactly 1."""
    kv_c = torch.zeros(1, KV_LORA_RANK)
    # value -> e4m3 byte at scale 1: 448 = 1.75 * 2**8 -> 0 1111 110; 1 -> 0 0111 000; -2 -> 1 1000 000;
    # 2**-9 (smallest subnormal) -> 0 0000 001; ties round to the even mantissa: 1.0625 -> 1 (0x38),
    # 1.1875 -> 1.25 (0x3A), 1.5 * 2**-9 -> 2 * 2**-9 (0x02).
    values_and_bytes = [(448.0, 0x7E), (1.0, 0x38), (-2.0, 0xC0), (2.0**-9, 0x01), (1.0625, 0x38), (1.1875, 0x3A),
                        (1.5 * 2.0**-9, 0x02)]
    for j, (value, _) in enumerate(values_and_bytes):
        kv_c[0, j] = value
    kv_c[0, 128] = -896.0  # group 1: amax 896, scale 2; -896 / 2 = -448 -> 1 1111 110
    kv_c[0, 129] = 3.0  # 1.5 -> 0 0111 100
    kv_c[0, 300:302] = torch.tensor([0.0, -0.0])  # group 2 all zero (with a -0.0): scale 0, zero bytes
    kv_c[0, 384] = 1e-3  # group 3: scale 1e-3 / 448 (fp32), 1e-3 / scale -> 448
    k_pe = torch.arange(QK_ROPE_HEAD_DIM, dtype=torch.float32)[None].to(torch.bfloat16)
    slot = quantize_slots(kv_c.to(torch.bfloat16), k_pe)[0]

    expected = torch.zeros(FP8_DS_MLA_SLOT_BYTES, dtype=torch.uint8)
    for j, (_, byte) in enumerate(values_and_bytes):
        expected[j] = byte
    expected[128], expected[129], expected[384] = 0xFE, 0x3C, 0x7E
    amax3 = float(torch.tensor(1e-3).to(torch.bfloat16))
    scale3 = struct.unpack("<f", struct.pack("<f", amax3))[0]
    scale3 = torch.tensor(scale3, dtype=torch.float32) / 448  # fp32 division, as the rule says
    expected[512:528] = torch.tensor(list(struct.pack("<4f", 1.0, 2.0, 0.0, float(scale3))), dtype=torch.uint8)
    expected[528:] = torch.tensor(list(struct.pack("<64H", *[int(b) for b in k_pe[0].view(torch.int16)])),
                                  dtype=torch.uint8)
    differ = (slot != expected).nonzero().flatten().tolist()
    assert not differ, f"bytes {differ} differ: got {slot[differ].tolist()}, expected {expected[differ].tolist()}"


def test_scale_rule_and_saturation():
    """scale = amax / 448 (fp32 division, not rounded to a power of 2); a quotient above 448 saturates."""
    # bf16 1.0234375 / (1.0234375 / 448) is 448.00003 in fp32: saturated to 448 (0x7E), never NaN.
    kv_c = torch.full((1, KV_LORA_RANK), 0.5)
    kv_c[0, 5] = -1.0234375
    kv_c = kv_c.to(torch.bfloat16)
    scale = torch.tensor(1.0234375, dtype=torch.float32) / 448
    assert -1.0234375 / scale < -448, "this input no longer exercises saturation"
    slot = quantize_slots(kv_c, torch.zeros(1, QK_ROPE_HEAD_DIM, dtype=torch.bfloat16))[0]
    assert slot[5] == 0xFE
    assert slot[512:516].view(torch.float32) == scale
    half_scale = torch.tensor(0.5, dtype=torch.float32) / 448  # the other groups' amax is 0.5
    assert torch.equal(group_scales(kv_c)[0], torch.stack([scale, half_scale, half_scale, half_scale]))


def test_tiny_group_scale_floor():
    """A non-zero group whose amax / 448 is below FLT_MIN gets scale FLT_MIN (vLLM's clamp)."""
    kv_c = torch.zeros(1, KV_LORA_RANK)
    kv_c[0, 0] = 2.0**-130  # a bf16 subnormal
    scales = group_scales(kv_c.to(torch.bfloat16))
    assert scales.tolist() == [[FLT_MIN, 0.0, 0.0, 0.0]]


@pytest.mark.parametrize("magnitudes", [(1.0, 1.0, 1.0, 1.0), (1e-4, 1e-1, 1e2, 1e3)], ids=["unit", "1e-4..1e3"])
def test_round_trip_error_bound(magnitudes):
    gen = testing.make_generator(CPU, seed=40)
    kv_c, k_pe = _tokens(gen, 33)
    kv_c = (kv_c.float().reshape(33, 4, 128) * torch.tensor(magnitudes)[:, None]).reshape(33, 512).to(torch.bfloat16)
    rows = dequantize_cache(quantize_slots(kv_c, k_pe))
    assert rows.shape == (33, 576) and rows.dtype == torch.float32
    assert torch.equal(rows[:, 512:], k_pe.float()), "k_rope must be stored unquantized"
    x = kv_c.float()
    scale = group_scales(kv_c).repeat_interleave(FP8_DS_MLA_GROUP_SIZE, dim=1)
    bound = torch.maximum(x.abs() * 2.0**-4, scale * 2.0**-10) * (1 + 1e-6)
    err = (rows[:, :512] - x).abs()
    assert (err <= bound).all(), f"max error / bound {(err / bound).max():.3f}"
    assert ((err / x.abs().clamp(min=1e-30)).mean() < 2.0**-5), "mean relative error of e4m3 rounding expected < 2**-5"


def test_dequantize_reads_any_scale_and_any_leading_shape():
    """FlashMLA's quantizer writes power-of-2 scales: readers take whatever fp32 is stored."""
    gen = testing.make_generator(CPU, seed=41)
    slots = torch.randint(0, 256, (2, 3, FP8_DS_MLA_SLOT_BYTES), generator=gen, dtype=torch.uint8)
    slots[..., :512][(slots[..., :512] & 0x7F) == 0x7F] = 0  # no NaN codes
    scales = torch.tensor([0.25, 3.0e-5, 1.0, 1024.0])
    slots[..., 512:528] = scales.view(torch.uint8)
    slots[..., 528:] = torch.randn(2, 3, 64, generator=gen).to(torch.bfloat16).view(torch.uint8)
    rows = dequantize_cache(slots)
    assert rows.shape == (2, 3, 576)
    for g in range(4):
        expected = slots[..., 128 * g : 128 * (g + 1)].view(torch.float8_e4m3fn).float() * scales[g]
        assert torch.equal(rows[..., 128 * g : 128 * (g + 1)], expected)
    assert torch.equal(rows[..., 512:], slots[..., 528:].contiguous().view(torch.bfloat16).float())


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda kv, pe: quantize_slots(kv.float(), pe), TypeError, "argument 'kv_c_normed' expected dtype torch.bfloat16"),
        (lambda kv, pe: quantize_slots(kv, pe[:1]), ValueError, r"argument 'k_pe' expected shape \(2, 64\), got \(1, 64\)"),
        (lambda kv, pe: dequantize_cache(torch.zeros(2, 576, dtype=torch.uint8)), ValueError,
         r"argument 'kv_cache' expected shape \(..., 656\), got \(2, 576\)"),
        (lambda kv, pe: dequantize_cache(kv), TypeError, "argument 'kv_cache' expected dtype torch.uint8"),
        (lambda kv, pe: group_scales(kv[:, :500]), ValueError, r"argument 'kv_c_normed' expected shape \(\*, 512\), got \(2, 500\)"),
        (lambda kv, pe: group_scales(kv.view(2, 4, 128)), ValueError, r"argument 'kv_c_normed' expected shape \(\*, 512\), got \(2, 4, 128\)"),
        (lambda kv, pe: group_scales(kv.float()), TypeError, "argument 'kv_c_normed' expected dtype torch.bfloat16"),
    ],
)
def test_bad_input_names_argument(call, error, message):
    kv_c, k_pe = _tokens(testing.make_generator(CPU, seed=42), 2)
    with pytest.raises(error, match=message):
        call(kv_c, k_pe)


def test_cache_formats():
    bf16 = torch.zeros(2, 64, 576, dtype=torch.bfloat16)
    fp8 = torch.zeros(2, 64, 656, dtype=torch.uint8)
    assert kv_cache_format.check_kv_cache("kv_cache", bf16) is kv_cache_format.BF16
    assert kv_cache_format.check_kv_cache("kv_cache", fp8) is kv_cache_format.FP8_DS_MLA
    assert kv_cache_format.FP8_DS_MLA.slot_bytes == 656 and kv_cache_format.BF16.slot_bytes == 1152
    for name in ("auto", None, "bfloat16"):
        assert kv_cache_format.format_of_kv_cache_dtype(name) is kv_cache_format.BF16
    assert kv_cache_format.format_of_kv_cache_dtype("fp8_ds_mla") is kv_cache_format.FP8_DS_MLA
    with pytest.raises(ValueError, match=re.escape("argument 'kv_cache_dtype' expected one of ['auto', 'bfloat16', "
                                                   "'fp8_ds_mla'], got 'fp8'")):
        kv_cache_format.format_of_kv_cache_dtype("fp8")
    with pytest.raises(ValueError, match=r"argument 'kv_cache' expected shape \(\*, 64, 656\), got \(2, 64, 576\)"):
        kv_cache_format.check_kv_cache("kv_cache", bf16.view(torch.int16).to(torch.uint8))
    with pytest.raises(TypeError, match="argument 'kv_cache' expected dtype torch.bfloat16, got torch.uint8"):
        kv_cache_format.check_kv_cache("kv_cache", torch.zeros(2, 64, 576, dtype=torch.uint8), kv_cache_format.BF16)
    with pytest.raises(TypeError, match="argument 'kv_cache' expected dtype torch.bfloat16 or torch.uint8, got torch.float32"):
        kv_cache_format.check_kv_cache("kv_cache", bf16.float())
    storage = torch.zeros(2 * 64 * 656 + 4, dtype=torch.uint8)
    with pytest.raises(ValueError, match="argument 'kv_cache' expected a data pointer aligned to 16 bytes"):
        kv_cache_format.check_kv_cache("kv_cache", storage[4:].view(2, 64, 656))
