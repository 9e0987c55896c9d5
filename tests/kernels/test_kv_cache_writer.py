"""KV-cache writer kernel against a PyTorch reference (Triton interpreter on CPU).

bf16 cache: bit-identical to a plain row copy. fp8_ds_mla cache: byte-identical to the host implementation
:func:`sparse_mla.fp8_ds_mla.quantize_slots` (whose own values are checked by test_fp8_ds_mla.py).
"""

import re

import pytest
import torch

import sparse_mla_testing as testing
from sparse_mla.constants import FP8_DS_MLA_SLOT_BYTES, KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE, KV_LORA_RANK, QK_ROPE_HEAD_DIM
from sparse_mla.fp8_ds_mla import E4M3_NAN_CODE, quantize_slots
from sparse_mla.kernels.kv_cache_writer import write_kv
from sparse_mla.kernels.triton_support import kernel_device_type
from sparse_mla_testing.markers import requires_triton_device

pytestmark = requires_triton_device

DEVICE = torch.device(kernel_device_type())
NUM_BLOCKS = 6
NUM_SLOTS = NUM_BLOCKS * KV_BLOCK_SIZE


def _poisoned_cache(gen, num_blocks=NUM_BLOCKS):
    """A random cache with every other row set to the bf16 pattern 0x7f7f, compared bit for bit below."""
    cache = testing.make_kv_cache(num_blocks, DEVICE, gen)
    cache[:, ::2].view(torch.int16).fill_(0x7F7F)
    return cache


def _reference_write(kv_cache, kv_c_normed, k_pe, slot_mapping):
    """Expected cache: rows of valid slots replaced by `[c_kv | k_rope]`, everything else bit-identical."""
    expected = kv_cache.clone()
    flat = expected.view(-1, KV_CACHE_HEAD_SIZE)
    for token, slot in enumerate(slot_mapping.tolist()):
        if 0 <= slot < flat.shape[0]:
            flat[slot] = torch.cat([kv_c_normed[token], k_pe.reshape(k_pe.shape[0], -1)[token]])
    return expected


def _assert_same_bits(got, expected):
    differ = (got.view(torch.int16) != expected.view(torch.int16)).any(dim=-1).nonzero()
    assert len(differ) == 0, f"cache rows (block, row) differ from the reference: {differ[:5].tolist()}"


def _new_tokens(gen, num_tokens):
    kv_c_normed = torch.randn(num_tokens, KV_LORA_RANK, generator=gen, device=DEVICE).to(torch.bfloat16)
    k_pe = torch.randn(num_tokens, QK_ROPE_HEAD_DIM, generator=gen, device=DEVICE).to(torch.bfloat16)
    return kv_c_normed, k_pe


@pytest.mark.parametrize("k_pe_rank", [2, 3])
def test_writes_slots_and_skips_padding(k_pe_rank):
    gen = testing.make_generator(DEVICE, seed=10)
    cache = _poisoned_cache(gen)
    kv_c_normed, k_pe = _new_tokens(gen, 7)
    if k_pe_rank == 3:
        k_pe = k_pe[:, None, :]
    # First and last slot of the cache, a block boundary, padding in the middle and at the end.
    slot_mapping = torch.tensor([0, 63, -1, 64, NUM_SLOTS - 1, 130, -1], dtype=torch.int64, device=DEVICE)
    expected = _reference_write(cache, kv_c_normed, k_pe, slot_mapping)
    write_kv(kv_c_normed, k_pe, cache, slot_mapping)
    _assert_same_bits(cache, expected)


def test_strided_inputs_and_cache():
    gen = testing.make_generator(DEVICE, seed=11)
    # kv_c_normed and k_pe split off one [T, 576 + 8] projection, the cache a view of wider rows.
    projection = torch.randn(5, KV_CACHE_HEAD_SIZE + 8, generator=gen, device=DEVICE).to(torch.bfloat16)
    kv_c_normed = projection[:, :KV_LORA_RANK]
    k_pe = projection[:, KV_LORA_RANK:KV_CACHE_HEAD_SIZE].unsqueeze(1)
    storage = torch.randn(NUM_BLOCKS, KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE + 32, generator=gen, device=DEVICE)
    storage = storage.to(torch.bfloat16)
    cache = storage[..., :KV_CACHE_HEAD_SIZE]
    before = storage.clone()
    slot_mapping = torch.tensor([5, 300, -1, 70, 64], dtype=torch.int64, device=DEVICE)
    write_kv(kv_c_normed, k_pe, cache, slot_mapping)
    _assert_same_bits(cache, _reference_write(before[..., :KV_CACHE_HEAD_SIZE], kv_c_normed, k_pe, slot_mapping))
    assert torch.equal(storage[..., KV_CACHE_HEAD_SIZE:], before[..., KV_CACHE_HEAD_SIZE:]), "wrote past a row"


def test_out_of_range_slots_are_skipped():
    gen = testing.make_generator(DEVICE, seed=12)
    cache = _poisoned_cache(gen)
    before = cache.clone()
    kv_c_normed, k_pe = _new_tokens(gen, 4)
    slot_mapping = torch.tensor([NUM_SLOTS, -2, 10, NUM_SLOTS + KV_BLOCK_SIZE], dtype=torch.int64, device=DEVICE)
    write_kv(kv_c_normed, k_pe, cache, slot_mapping)
    _assert_same_bits(cache, _reference_write(before, kv_c_normed, k_pe, slot_mapping))


def test_check_mode_names_first_bad_token():
    gen = testing.make_generator(DEVICE, seed=13)
    cache = _poisoned_cache(gen)
    kv_c_normed, k_pe = _new_tokens(gen, 4)
    write_kv(kv_c_normed, k_pe, cache, torch.tensor([1, -1, 2, 3], device=DEVICE), check=True)  # all good
    before = cache.clone()
    slot_mapping = torch.tensor([1, -1, NUM_SLOTS, -5], dtype=torch.int64, device=DEVICE)
    message = f"token 2: slot_mapping expected -1 or in [0, num_blocks * 64 = {NUM_SLOTS}), got {NUM_SLOTS}"
    with pytest.raises(ValueError, match=re.escape(message)):
        write_kv(kv_c_normed, k_pe, cache, slot_mapping, check=True)
    _assert_same_bits(cache, before)  # nothing written when the check fails
    duplicated = torch.tensor([7, -1, 9, 7], dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match=re.escape("tokens 0 and 3: slot_mapping expected distinct slots, got 7")):
        write_kv(kv_c_normed, k_pe, cache, duplicated, check=True)
    _assert_same_bits(cache, before)


def test_zero_tokens():
    gen = testing.make_generator(DEVICE, seed=14)
    cache = _poisoned_cache(gen)
    before = cache.clone()
    kv_c_normed, k_pe = _new_tokens(gen, 0)
    write_kv(kv_c_normed, k_pe, cache, torch.empty(0, dtype=torch.int64, device=DEVICE))
    _assert_same_bits(cache, before)


def _good_args():
    gen = testing.make_generator(DEVICE, seed=15)
    kv_c_normed, k_pe = _new_tokens(gen, 3)
    return dict(
        kv_c_normed=kv_c_normed,
        k_pe=k_pe,
        kv_cache=torch.zeros(2, KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE, dtype=torch.bfloat16, device=DEVICE),
        slot_mapping=torch.tensor([0, 1, 2], dtype=torch.int64, device=DEVICE),
    )


@pytest.mark.parametrize(
    "name, bad, error, message",
    [
        ("kv_c_normed", lambda a: a.half(), TypeError, "argument 'kv_c_normed' expected dtype torch.bfloat16, got torch.float16"),
        ("kv_c_normed", lambda a: a[:, :256], ValueError, r"argument 'kv_c_normed' expected shape \(\*, 512\), got \(3, 256\)"),
        ("k_pe", lambda a: a[:2], ValueError, r"argument 'k_pe' expected shape \(3, 64\), got \(2, 64\)"),
        ("k_pe", lambda a: a.view(3, 2, 32), ValueError, r"argument 'k_pe' expected shape \(3, 1, 64\), got \(3, 2, 32\)"),
        ("k_pe", lambda a: None, TypeError, "argument 'k_pe' expected a torch.Tensor, got NoneType"),
        ("kv_cache", lambda a: a.view(4, 32, 576), ValueError, r"argument 'kv_cache' expected shape \(\*, 64, 576\), got \(4, 32, 576\)"),
        ("kv_cache", lambda a: a.float(), TypeError,
         "argument 'kv_cache' expected dtype torch.bfloat16 or torch.uint8, got torch.float32"),
        ("kv_cache", lambda a: a.view(torch.uint8)[..., :640], ValueError,
         r"argument 'kv_cache' expected shape \(\*, 64, 656\), got \(2, 64, 640\)"),
        ("kv_cache", lambda a: torch.zeros(2, 64, 2 * 656, dtype=torch.uint8, device=a.device)[..., :656], ValueError,
         r"argument 'kv_cache' expected strides \(\*, 656, 1\) \(contiguous slots\), got \(83968, 1312, 1\)"),
        ("slot_mapping", lambda a: a.int(), TypeError, "argument 'slot_mapping' expected dtype torch.int64, got torch.int32"),
        ("slot_mapping", lambda a: a[:1], ValueError, r"argument 'slot_mapping' expected shape \(3,?\), got \(1,\)"),
    ],
)
def test_bad_input_names_argument(name, bad, error, message):
    args = _good_args()
    args[name] = bad(args[name])
    with pytest.raises(error, match=message):
        write_kv(**args)


# --------------------------------------------------------------------------------------------------
# fp8_ds_mla cache


def _poisoned_fp8_cache(gen, num_blocks=NUM_BLOCKS, block_padding=0):
    """A uint8 `[num_blocks, 64, 656]` cache of random bytes, its blocks ``64 * 656 + block_padding`` bytes apart."""
    block_bytes = KV_BLOCK_SIZE * FP8_DS_MLA_SLOT_BYTES
    storage = torch.randint(0, 256, (num_blocks, block_bytes + block_padding), generator=gen, dtype=torch.uint8,
                            device=DEVICE)
    return storage[:, :block_bytes].view(num_blocks, KV_BLOCK_SIZE, FP8_DS_MLA_SLOT_BYTES), storage


def _reference_fp8_write(kv_cache, kv_c_normed, k_pe, slot_mapping):
    """Expected cache: slots of valid tokens replaced by quantize_slots' bytes, everything else unchanged."""
    expected = kv_cache.clone()
    slots = quantize_slots(kv_c_normed, k_pe.reshape(k_pe.shape[0], -1))
    flat = expected.view(-1, FP8_DS_MLA_SLOT_BYTES)
    for token, slot in enumerate(slot_mapping.tolist()):
        if 0 <= slot < flat.shape[0]:
            flat[slot] = slots[token]
    return expected


def _assert_same_bytes(got, expected):
    differ = (got != expected).nonzero()
    assert len(differ) == 0, (
        f"{len(differ)} cache bytes (block, row, byte) differ from the host implementation, first "
        f"{differ[:5].tolist()}: got {got[tuple(differ[:5].T)].tolist()}, expected {expected[tuple(differ[:5].T)].tolist()}"
    )


def _e4m3_boundary_values():
    """Every positive finite e4m3fn value, every midpoint between neighbours (a tie: rounds to the even code),
    and the bf16 neighbours of each midpoint (just below / above a tie), as float32."""
    codes = torch.arange(1, 127, dtype=torch.uint8)  # 2**-9 .. 448
    values = torch.cat([torch.zeros(1), codes.view(torch.float8_e4m3fn).float()])
    midpoints = (values[:-1] + values[1:]) / 2
    mid_bf16 = midpoints.to(torch.bfloat16)
    assert torch.equal(mid_bf16.float(), midpoints), "midpoints are exact in bf16"
    below = (mid_bf16.view(torch.int16) - 1).view(torch.bfloat16).float()
    above = (mid_bf16.view(torch.int16) + 1).view(torch.bfloat16).float()
    return torch.cat([values[1:], midpoints, below, above])


@pytest.mark.parametrize("k_pe_rank", [2, 3])
def test_fp8_writes_slots_byte_exact(k_pe_rank):
    """Random latents whose 128-groups differ wildly in magnitude within one slot, an all-zero group, a group
    of only tiny values; padding and out-of-range slots leave the (random) cache untouched."""
    gen = testing.make_generator(DEVICE, seed=20)
    cache, _ = _poisoned_fp8_cache(gen)
    num_tokens = 9
    kv_c = torch.randn(num_tokens, 4, 128, generator=gen, device=DEVICE)
    kv_c *= torch.tensor([1e-4, 1e-1, 1e2, 1e3], device=DEVICE)[:, None]  # one scale per group, 1e-4 ... 1e3
    kv_c[1, 2] = 0.0  # an all-zero group: scale 0, zero bytes
    kv_c[2, 0] = -0.0
    kv_c[3, 1] *= 1e-30  # below FLT_MIN * 448: scale FLT_MIN
    kv_c_normed = kv_c.reshape(num_tokens, KV_LORA_RANK).to(torch.bfloat16)
    k_pe = torch.randn(num_tokens, QK_ROPE_HEAD_DIM, generator=gen, device=DEVICE).to(torch.bfloat16)
    if k_pe_rank == 3:
        k_pe = k_pe[:, None, :]
    slot_mapping = torch.tensor([0, 63, -1, 64, NUM_SLOTS - 1, 130, NUM_SLOTS, -7, 200], dtype=torch.int64,
                                device=DEVICE)
    expected = _reference_fp8_write(cache, kv_c_normed, k_pe, slot_mapping)
    write_kv(kv_c_normed, k_pe, cache, slot_mapping)
    _assert_same_bytes(cache, expected)
    zero_group = cache.view(-1, FP8_DS_MLA_SLOT_BYTES)[63]
    assert (zero_group[256:384] == 0).all() and zero_group[520:524].view(torch.float32).item() == 0.0


def test_fp8_rounding_at_e4m3_boundaries():
    """Quotients on every e4m3 value, every tie and both sides of each tie, at power-of-2 scales (each group's
    amax is 448 * 2**k, so x / scale is exact), and a quotient that exceeds 448 by rounding (saturates)."""
    host_gen = torch.Generator().manual_seed(21)  # the inputs are built on the host, the cache on DEVICE
    gen = testing.make_generator(DEVICE, seed=21)
    values = _e4m3_boundary_values()
    values = torch.cat([values, -values])
    per_group = 127  # plus the group's amax
    num_groups = -(-len(values) // per_group)
    values = torch.cat([values, torch.ones(num_groups * per_group - len(values))]).reshape(num_groups, per_group)
    powers = torch.tensor([2.0 ** (k % 11 - 5) for k in range(num_groups)])[:, None]
    groups = torch.cat([torch.full((num_groups, 1), 448.0), values], dim=1) * powers
    num_tokens = -(-num_groups // 4) + 1
    kv_c = torch.ones(num_tokens * 4, 128)
    kv_c[:num_groups] = groups[:, torch.randperm(128, generator=host_gen)]
    kv_c[-4:] = 0.5
    kv_c[-4, 7] = 1.0234375  # scale 1.0234375 / 448: 1.0234375 / scale = 448.00003 in fp32
    kv_c_normed = kv_c.reshape(num_tokens, KV_LORA_RANK).to(torch.bfloat16)
    assert torch.equal(kv_c_normed.float(), kv_c.reshape(num_tokens, KV_LORA_RANK)), "inputs are exact in bf16"
    k_pe = torch.randn(num_tokens, QK_ROPE_HEAD_DIM, generator=host_gen).to(torch.bfloat16)
    cache, _ = _poisoned_fp8_cache(gen)
    slot_mapping = torch.randperm(NUM_SLOTS, generator=host_gen)[:num_tokens].to(DEVICE)
    expected = _reference_fp8_write(cache, kv_c_normed, k_pe, slot_mapping)
    write_kv(kv_c_normed.to(DEVICE), k_pe.to(DEVICE), cache, slot_mapping)
    _assert_same_bytes(cache, expected)


def test_fp8_non_finite_latents_as_vllm_stores_them():
    """NaN is left out of a group's amax and stored as the NaN code 0x7F; an infinite latent makes its group's
    scale infinite (its code NaN, the finite ones zero); a group of NaN and zeros keeps scale 0."""
    gen = testing.make_generator(DEVICE, seed=23)
    kv_c = torch.randn(3, 4, 128, generator=gen, device=DEVICE)
    kv_c[0, 0, 7] = float("nan")
    kv_c[0, 1, :] = float("nan")  # a group of NaN only
    kv_c[0, 2, 3] = float("-inf")
    kv_c[1, 3, :] = 0.0
    kv_c[1, 3, 9] = float("nan")  # NaN among zeros
    kv_c_normed = kv_c.reshape(3, KV_LORA_RANK).to(torch.bfloat16)
    k_pe = torch.randn(3, QK_ROPE_HEAD_DIM, generator=gen, device=DEVICE).to(torch.bfloat16)
    cache, _ = _poisoned_fp8_cache(gen)
    slot_mapping = torch.tensor([3, 70, 200], dtype=torch.int64, device=DEVICE)
    expected = _reference_fp8_write(cache, kv_c_normed, k_pe, slot_mapping)
    write_kv(kv_c_normed, k_pe, cache, slot_mapping)
    _assert_same_bytes(cache, expected)
    slots = cache.view(-1, FP8_DS_MLA_SLOT_BYTES)
    codes, scales = slots[[3, 70], :KV_LORA_RANK].view(2, 4, 128), slots[[3, 70], 512:528].view(torch.float32)
    finite = kv_c_normed[0, :128].float()
    assert codes[0, 0, 7] == E4M3_NAN_CODE and scales[0, 0] == finite[~finite.isnan()].abs().max() / 448
    assert (codes[0, 1] == E4M3_NAN_CODE).all() and scales[0, 1] == 0.0
    assert codes[0, 2, 3] == E4M3_NAN_CODE and scales[0, 2] == float("inf")
    assert ((codes[0, 2] == 0) | (codes[0, 2] == 0x80) | (codes[0, 2] == E4M3_NAN_CODE)).all()
    assert codes[1, 3, 9] == E4M3_NAN_CODE and (codes[1, 3, :9] == 0).all() and scales[1, 3] == 0.0


def test_fp8_padded_block_stride_and_strided_inputs():
    gen = testing.make_generator(DEVICE, seed=22)
    cache, storage = _poisoned_fp8_cache(gen, block_padding=7 * FP8_DS_MLA_SLOT_BYTES)  # vLLM-style padding
    before = storage.clone()
    projection = torch.randn(5, KV_CACHE_HEAD_SIZE + 8, generator=gen, device=DEVICE).to(torch.bfloat16)
    kv_c_normed, k_pe = projection[:, :KV_LORA_RANK], projection[:, KV_LORA_RANK:KV_CACHE_HEAD_SIZE]
    slot_mapping = torch.tensor([5, 300, -1, 70, 64], dtype=torch.int64, device=DEVICE)
    expected = _reference_fp8_write(cache, kv_c_normed, k_pe, slot_mapping)
    write_kv(kv_c_normed, k_pe, cache, slot_mapping)
    _assert_same_bytes(cache, expected)
    gap = KV_BLOCK_SIZE * FP8_DS_MLA_SLOT_BYTES
    assert torch.equal(storage[:, gap:], before[:, gap:]), "wrote into the padding between blocks"


def test_fp8_check_mode_and_zero_tokens():
    gen = testing.make_generator(DEVICE, seed=23)
    cache, _ = _poisoned_fp8_cache(gen)
    before = cache.clone()
    kv_c_normed, k_pe = _new_tokens(gen, 2)
    with pytest.raises(ValueError, match=re.escape(f"token 1: slot_mapping expected -1 or in [0, num_blocks * 64 = "
                                                   f"{NUM_SLOTS}), got {NUM_SLOTS}")):
        write_kv(kv_c_normed, k_pe, cache, torch.tensor([3, NUM_SLOTS], device=DEVICE), check=True)
    empty_c, empty_pe = _new_tokens(gen, 0)
    write_kv(empty_c, empty_pe, cache, torch.empty(0, dtype=torch.int64, device=DEVICE))
    _assert_same_bytes(cache, before)
