"""The fused Triton sparse-MLA attention kernel in Triton's interpreter (CPU), against the fp32 reference.

Run with ``TRITON_INTERPRET=1``. Shapes are small (top-k width 128, a few tokens) because the
interpreter executes every program in Python; the launch configurations are chosen explicitly so that
the unsplit path, the split path with its in-kernel merge, several column blocks and several head
blocks are all exercised.

The interpreter runs programs one after another, so these tests check the split merge's arithmetic
and counter reset, not its ordering between concurrent CTAs: the GPU tests cover that.

Accuracy: ``rel = ||out - ref|| / ||ref|| < 1e-2`` for the bf16 output against the fp32 reference;
the natural-log LSE within ``1e-2 * max(1, |ref|)`` where finite and ``-inf`` exactly where the
reference has no valid position. The fp8_ds_mla cache (the bf16 case's cache quantized by the host
implementation) is held to the same bounds against the reference on that fp8 cache (which dequantizes it):
the kernel's own error, not the quantization's.
"""

import dataclasses
from typing import Optional

import pytest
import torch

from sparse_mla import reference
import sparse_mla_testing as testing
from sparse_mla.constants import DEEPSEEK_V32_SOFTMAX_SCALE, KV_BLOCK_SIZE
from sparse_mla.kernels.sparse_mla_attention import (
    LaunchConfig,
    SplitWorkspace,
    plan_launch,
    default_launch_config,
    sparse_mla_attention,
)
from sparse_mla.kernels.triton_support import interpreting

pytestmark = pytest.mark.skipif(not interpreting(), reason="CPU tests run the kernel in Triton's interpreter (TRITON_INTERPRET=1)")

CPU = torch.device("cpu")
TOPK = 128
NUM_BLOCKS = 24
REL_TOL = 1e-2
LSE_TOL = 1e-2

UNSPLIT = LaunchConfig(block_h=16, block_n=32, block_dv=512, num_splits=1, num_warps=4, num_stages=1)
SPLIT_4 = LaunchConfig(block_h=16, block_n=32, block_dv=256, num_splits=4, num_warps=4, num_stages=1)
SPLIT_3_UNEVEN = LaunchConfig(block_h=16, block_n=16, block_dv=512, num_splits=3, num_warps=4, num_stages=1)
SPLIT_2_COLUMNS_4 = LaunchConfig(block_h=16, block_n=32, block_dv=128, num_splits=2, num_warps=4, num_stages=1)
SPLIT_8_COLUMNS_8 = LaunchConfig(block_h=16, block_n=16, block_dv=64, num_splits=8, num_warps=4, num_stages=1)
# One warp: a small merge tile, so the merge steps through several head and column chunks.
SPLIT_8_ONE_WARP = LaunchConfig(block_h=16, block_n=16, block_dv=512, num_splits=8, num_warps=1, num_stages=1)


@dataclasses.dataclass
class Case:
    q_nope: torch.Tensor  # [T, N, 512] bf16 (view of a [T, N, 576] tensor)
    q_rope: torch.Tensor  # [T, N, 64] bf16
    kv_cache: torch.Tensor  # [NUM_BLOCKS, 64, 576] bf16, or [NUM_BLOCKS, 64, 656] uint8 fp8_ds_mla
    topk_indices: torch.Tensor  # [T, TOPK] int32
    req_id: torch.Tensor  # [T] int32
    token_kv_len: torch.Tensor  # [T] int32
    block_table: torch.Tensor  # [R, max_blocks] int32

    def run(self, config: Optional[LaunchConfig], **kwargs):
        num_tokens, num_heads, _ = self.q_nope.shape
        out = torch.full((num_tokens, num_heads, 512), float("nan"), dtype=torch.bfloat16)  # poisoned
        lse = torch.full((num_tokens, num_heads), float("nan"), dtype=torch.float32)  # poisoned
        result = sparse_mla_attention(
            self.q_nope, self.q_rope, self.kv_cache, self.topk_indices, self.req_id, self.token_kv_len,
            self.block_table, DEEPSEEK_V32_SOFTMAX_SCALE, out=out, lse=lse, return_lse=True, config=config, **kwargs,
        )
        assert result[0] is out and result[1] is lse
        return out, lse

    def reference(self):
        """fp32 reference over the slots the index conversion's reference keeps (-1 elsewhere)."""
        slot_ids = reference.global_slot_ids_reference(
            self.topk_indices, self.req_id, self.token_kv_len, self.block_table, NUM_BLOCKS
        )
        return reference.sparse_mla_reference(self.q_nope, self.q_rope, self.kv_cache, slot_ids, DEEPSEEK_V32_SOFTMAX_SCALE)


CACHE_FORMATS = ("bfloat16", "fp8_ds_mla")


def make_case(seq_lens, query_lens, num_heads, seed, pattern="end", drop_fraction=0.0, cache_format="bfloat16") -> Case:
    gen = testing.make_generator(CPU, seed)
    batch = testing.make_batch(seq_lens, query_lens, NUM_BLOCKS, gen, topk=TOPK, pattern=pattern, drop_fraction=drop_fraction)
    kv_cache = testing.make_kv_cache(NUM_BLOCKS, CPU, gen)
    if cache_format == "fp8_ds_mla":
        kv_cache = testing.fp8_ds_mla_kv_cache(kv_cache)
    q_nope, q_rope = testing.make_queries(batch.num_tokens, num_heads, CPU, gen)
    return Case(q_nope, q_rope, kv_cache, batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table)


def assert_close(out, lse, ref_out, ref_lse):
    rel = testing.relative_error(out, ref_out)
    assert rel < REL_TOL, f"out: rel err {rel:.3e} expected < {REL_TOL:.0e}"
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty), f"lse -inf pattern differs: got {lse}, expected {ref_lse}"
    assert torch.all(out[empty[:, :, None].expand_as(out)] == 0), "a head without valid positions must output 0"
    finite = ~empty
    err = ((lse - ref_lse).abs() / ref_lse.abs().clamp(min=1.0))[finite]
    assert err.numel() == 0 or err.max() < LSE_TOL, f"lse: err {err.max():.3e} expected < {LSE_TOL:.0e}"


@pytest.mark.parametrize(
    "seq_lens, query_lens, num_heads, pattern, drop, config",
    [
        ([300], [1], 16, "end", 0.0, UNSPLIT),
        ([200, 500, 90], [1, 1, 1], 5, "scattered", 0.3, SPLIT_4),
        ([100], [1], 1, "start", 0.0, SPLIT_3_UNEVEN),
        ([260], [1], 20, "scattered", 0.1, SPLIT_2_COLUMNS_4),  # two head blocks, the second with 4 heads
        ([180], [1], 16, "scattered", 0.5, SPLIT_8_COLUMNS_8),  # the H200 default's shape for T=1, N=16
        ([140], [1], 3, "end", 0.0, SPLIT_8_ONE_WARP),
        ([400, 150], [2, 1], 16, "end", 0.2, None),  # speculative tokens; default configuration
    ],
    ids=[
        "T1-N16-unsplit", "T3-N5-split4", "T1-N1-split3-uneven", "T1-N20-split2-dv128", "T1-N16-split8-dv64",
        "T1-N3-split8-chunked-merge", "T3-N16-default",
    ],
)
def test_matches_reference(seq_lens, query_lens, num_heads, pattern, drop, config):
    case = make_case(seq_lens, query_lens, num_heads, seed=len(seq_lens) * 100 + num_heads, pattern=pattern, drop_fraction=drop)
    out, lse = case.run(config)
    assert_close(out, lse, *case.reference())


# H200 defaults of the two small-T regimes at N = 128 (h64, column split or full columns), shrunk to TOPK.
H64_SPLIT_2_COLUMNS_8 = LaunchConfig(block_h=64, block_n=16, block_dv=64, num_splits=2, num_warps=4, num_stages=1)


@pytest.mark.parametrize(
    "seq_lens, query_lens, num_heads, pattern, drop, config",
    [
        ([300], [1], 1, "scattered", 0.3, UNSPLIT),
        ([200, 500, 90], [1, 1, 1], 16, "scattered", 0.3, SPLIT_4),
        ([180], [1], 16, "scattered", 0.5, SPLIT_8_COLUMNS_8),
        ([260], [1], 128, "end", 0.2, H64_SPLIT_2_COLUMNS_8),
        ([400, 150], [2, 1], 16, "start", 0.2, None),
    ],
    ids=["T1-N1-unsplit", "T3-N16-split4-dv256", "T1-N16-split8-dv64", "T1-N128-h64-split2-dv64", "T3-N16-default"],
)
def test_fp8_ds_mla_matches_reference(seq_lens, query_lens, num_heads, pattern, drop, config, capsys):
    """The fp8_ds_mla cache read and dequantized in registers, against the reference on the same cache."""
    case = make_case(seq_lens, query_lens, num_heads, seed=len(seq_lens) * 100 + num_heads + 1, pattern=pattern,
                     drop_fraction=drop, cache_format="fp8_ds_mla")
    assert case.kv_cache.dtype == torch.uint8
    out, lse = case.run(config)
    ref_out, ref_lse = case.reference()
    with capsys.disabled():
        print(f"\nfp8_ds_mla N={num_heads} T={case.q_nope.shape[0]}: rel err {testing.relative_error(out, ref_out):.2e}")
    assert_close(out, lse, ref_out, ref_lse)


@pytest.mark.parametrize(
    "cache_format, block_padding",
    [("bfloat16", 7 * 576), ("bfloat16", 100), ("fp8_ds_mla", 7 * 656)],
    ids=["whole-slots", "unaligned", "fp8-whole-slots"],
)
@pytest.mark.parametrize("config", [UNSPLIT, SPLIT_4], ids=["unsplit", "split4"])
def test_padded_cache_and_transposed_queries_match_reference(cache_format, block_padding, config):
    """vLLM's tensors as they come: blocks further apart than 64 slots (NaN, or 0xFF bytes, in the gaps) and a
    head-major ``q_nope`` view; the kernel reads them in place and matches the contiguous reference."""
    case = make_case([260, 90], [2, 1], num_heads=5, seed=17, pattern="scattered", drop_fraction=0.2,
                     cache_format=cache_format)
    ref_out, ref_lse = case.reference()
    strided = dataclasses.replace(case, q_nope=testing.transposed_copy(case.q_nope),
                                  kv_cache=testing.padded_kv_cache(case.kv_cache, block_padding))
    slot_width = case.kv_cache.shape[-1]
    assert strided.q_nope.stride(1) != 512 and strided.kv_cache.stride(0) == 64 * slot_width + block_padding
    out, lse = strided.run(config)
    assert_close(out, lse, ref_out, ref_lse)


@pytest.mark.parametrize("cache_format", CACHE_FORMATS)
@pytest.mark.parametrize("config", [UNSPLIT, SPLIT_4], ids=["unsplit", "split4"])
def test_invalid_entries_are_skipped(config, cache_format):
    """-1 anywhere, positions past the length or the block table, bad block ids, a bad request row."""
    case = make_case([250, 300], [2, 2], num_heads=5, seed=7, pattern="scattered", cache_format=cache_format)
    topk = case.topk_indices
    max_pos = case.block_table.shape[1] * KV_BLOCK_SIZE
    topk[0] = -1  # no valid position at all
    topk[1, 3] = int(case.token_kv_len[1])  # one past the causal length
    topk[1, 6] = -7  # other negative values are not valid either
    col_of = lambda pos: pos // KV_BLOCK_SIZE  # noqa: E731
    case.block_table[0, col_of(int(topk[1, 10]))] = -3  # block id below 0
    case.block_table[0, col_of(int(topk[1, 11]))] = NUM_BLOCKS  # block id past the cache
    case.req_id[2] = case.block_table.shape[0] + 5  # request row out of range
    case.token_kv_len[3] = 1 << 20  # a length past the block table: the table's width decides
    topk[3, 5] = max_pos + 7
    topk[3, 9] = 4 * max_pos
    out, lse = case.run(config)
    ref_out, ref_lse = case.reference()
    assert torch.isneginf(ref_lse[0]).all() and torch.isneginf(ref_lse[2]).all()
    assert_close(out, lse, ref_out, ref_lse)


@pytest.mark.parametrize("cache_format", CACHE_FORMATS)
@pytest.mark.parametrize("config", [UNSPLIT, SPLIT_4], ids=["unsplit", "split4"])
def test_nan_in_a_selected_slot_propagates(config, cache_format):
    """A NaN latent (bf16 NaN, or the fp8 NaN codes 0x7F / 0xFF) makes the output and the LSE of every token
    that selects its slot NaN, as in the reference; the other tokens are unaffected."""
    case = make_case([250, 300], [1, 1], num_heads=4, seed=8, pattern="scattered", cache_format=cache_format)
    slot_ids = reference.global_slot_ids_reference(case.topk_indices, case.req_id, case.token_kv_len,
                                                   case.block_table, NUM_BLOCKS)
    poisoned = int(slot_ids[0][slot_ids[0] >= 0][0])
    row = case.kv_cache.view(-1, case.kv_cache.shape[-1])[poisoned]
    if cache_format == "fp8_ds_mla":
        row[3], row[200] = 0x7F, 0xFF
    else:
        row[3] = float("nan")
    out, lse = case.run(config)
    ref_out, ref_lse = case.reference()
    assert torch.isnan(ref_lse[0]).all() and torch.isnan(lse[0]).all() and torch.isnan(out[0]).any(dim=-1).all()
    assert not (slot_ids[1] == poisoned).any()
    assert_close(out[1:], lse[1:], ref_out[1:], ref_lse[1:])


def test_workspace_is_reused_and_left_clean():
    """Two calls through one explicit workspace: counters are zero after each, results stay right."""
    config = SPLIT_2_COLUMNS_4
    first = make_case([180], [1], num_heads=16, seed=11, pattern="end")
    second = make_case([220], [1], num_heads=16, seed=12, pattern="scattered", drop_fraction=0.5)
    sizes = SplitWorkspace.sizes(1, 16, TOPK, config)
    workspace = SplitWorkspace(CPU, *sizes)
    for case in (first, second):
        out, lse = case.run(config, workspace=workspace)
        assert_close(out, lse, *case.reference())
        assert torch.count_nonzero(workspace.counters) == 0, f"arrival counters left dirty: {workspace.counters}"
    small = SplitWorkspace(CPU, sizes[0] - 1, sizes[1], sizes[2])
    with pytest.raises(ValueError, match="workspace"):
        first.run(config, workspace=small)


def test_num_splits_override_and_output_views():
    """``num_splits`` overrides the configuration; ``out`` may be a strided view with a unit last stride."""
    case = make_case([330], [1], num_heads=3, seed=5, pattern="start", drop_fraction=0.25)
    big = torch.full((1, 8, 512), float("nan"), dtype=torch.bfloat16)
    out = big[:, 2:5]  # [1, 3, 512], stride(1) = 512, stride(0) = 4096
    result = sparse_mla_attention(
        case.q_nope, case.q_rope, case.kv_cache, case.topk_indices, case.req_id, case.token_kv_len,
        case.block_table, DEEPSEEK_V32_SOFTMAX_SCALE, out=out, config=UNSPLIT, num_splits=2,
    )
    assert result is out
    ref_out, _ = case.reference()
    rel = testing.relative_error(out, ref_out)
    assert rel < REL_TOL, f"out: rel err {rel:.3e} expected < {REL_TOL:.0e}"
    assert torch.isnan(big[:, :2]).all() and torch.isnan(big[:, 5:]).all(), "wrote outside the output view"


def test_empty_batch():
    case = make_case([100], [1], num_heads=4, seed=3)
    empty = dict(
        q_nope=case.q_nope[:0], q_rope=case.q_rope[:0], kv_cache=case.kv_cache, topk_indices=case.topk_indices[:0],
        req_id=case.req_id[:0], token_kv_len=case.token_kv_len[:0], block_table=case.block_table,
    )
    out, lse = sparse_mla_attention(**empty, softmax_scale=1.0, return_lse=True)
    assert out.shape == (0, 4, 512) and lse.shape == (0, 4)


def _args(case: Case):
    return dict(
        q_nope=case.q_nope, q_rope=case.q_rope, kv_cache=case.kv_cache, topk_indices=case.topk_indices,
        req_id=case.req_id, token_kv_len=case.token_kv_len, block_table=case.block_table, softmax_scale=1.0,
    )


@pytest.mark.parametrize(
    "change, error, match",
    [
        (lambda a: a.update(q_nope=a["q_nope"].float()), TypeError, "q_nope"),
        (lambda a: a.update(q_rope=a["q_rope"][..., :32]), ValueError, "q_rope"),
        (lambda a: a.update(kv_cache=a["kv_cache"][:, :32]), ValueError, "kv_cache"),
        (lambda a: a.update(topk_indices=a["topk_indices"].long()), TypeError, "topk_indices"),
        (lambda a: a.update(req_id=a["req_id"][:0]), ValueError, "req_id"),
        (lambda a: a.update(token_kv_len=a["token_kv_len"].long()), TypeError, "token_kv_len"),
        (lambda a: a.update(block_table=a["block_table"][0]), ValueError, "block_table"),
        (lambda a: a.update(out=torch.empty(1, 4, 512, dtype=torch.float32)), TypeError, "out"),
        (lambda a: a.update(lse=torch.empty(1, 5, dtype=torch.float32)), ValueError, "lse"),
        (lambda a: a.update(q_nope=a["q_nope"].transpose(1, 2).contiguous().transpose(1, 2)), ValueError,
         "argument 'q_nope' expected unit stride in the last dim"),
        (lambda a: a.update(kv_cache=a["kv_cache"].transpose(1, 2).contiguous().transpose(1, 2)), ValueError,
         "argument 'kv_cache' expected unit stride in the last dim"),
        (lambda a: a.update(kv_cache=a["kv_cache"].float()), TypeError,
         "argument 'kv_cache' expected dtype torch.bfloat16 or torch.uint8, got torch.float32"),
        (lambda a: a.update(kv_cache=testing.fp8_ds_mla_kv_cache(a["kv_cache"])[..., :640]), ValueError,
         r"argument 'kv_cache' expected shape \(\*, 64, 656\)"),
        (lambda a: a.update(kv_cache=testing.padded_kv_cache(testing.fp8_ds_mla_kv_cache(a["kv_cache"]), 100)),
         ValueError, "argument 'kv_cache' expected a block stride that is a multiple of 656"),
        (lambda a: a.update(config=dataclasses.replace(UNSPLIT, block_h=8)), ValueError, "block_h"),
        (lambda a: a.update(num_splits=0), ValueError, "num_splits"),
    ],
)
def test_bad_arguments(change, error, match):
    args = _args(make_case([100], [1], num_heads=4, seed=3))
    change(args)
    with pytest.raises(error, match=match):
        sparse_mla_attention(**args)


def test_too_many_heads():
    gen = testing.make_generator(CPU, 1)
    case = make_case([100], [1], num_heads=4, seed=3)
    q_nope, q_rope = testing.make_queries(1, 129, CPU, gen)
    args = _args(case)
    args.update(q_nope=q_nope, q_rope=q_rope)
    with pytest.raises(ValueError, match="129"):
        sparse_mla_attention(**args)


H200_SMS = 132


@pytest.mark.parametrize("num_heads", [1, 7, 16, 32, 64, 100, 128])
def test_default_launch_config(num_heads):
    """The default rule: valid configurations, splits only while the SMs are not full, bounded workspace."""
    for num_tokens in [1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096]:
        config = default_launch_config(num_tokens, num_heads, H200_SMS, 2048)
        plan = plan_launch(num_heads, 2048, config)
        programs = num_tokens * plan.num_programs_per_token
        assert config.block_h >= 16 and 512 % config.block_dv == 0
        if 2 * num_tokens * plan.head_blocks > H200_SMS:
            assert plan.num_splits == 1 and config.block_dv == 512, (num_tokens, config)
        else:
            assert programs <= 2 * H200_SMS, (num_tokens, config, programs)  # 2 small programs per SM at most
    workspace_sizes = SplitWorkspace.sizes
    need = [workspace_sizes(t, num_heads, 2048, default_launch_config(t, num_heads, H200_SMS, 2048)) for t in range(1, 300)]
    biggest = [max(n[i] for n in need) for i in range(3)]
    assert biggest[0] * 4 < 32 * 2**20, f"default split workspace {biggest[0] * 4} bytes expected < 32 MiB"
    workspace = SplitWorkspace.for_max_tokens(300, num_heads, torch.device("meta"), 2048, num_sms=H200_SMS)
    assert all(workspace.fits(n) for n in need)
