"""GPU: the 16/32-head decode kernel, a programmatic dependent launch, attends to what the kernel just ahead of it writes.

The kernel ahead (a Triton copy) lets its dependents launch at once (``griddepcontrol.launch_dependents``),
waits 20 µs, then overwrites one input of the forward with new values: the top-k rows, ``req_id``,
``token_kv_len``, the block table, the cache or ``q_nope``. The forward, captured in one CUDA graph with it and
replayed, must match the fp32 reference on the new values. Its CTAs may start while the copy waits, and nothing
they read before their ``griddepcontrol.wait`` may reach the output; each input's stale values differ from the
new ones. On the H200 (2026-12-02), a kernel that translated its positions and loaded its queries before the wait
failed every case here except the cache's. Eager launches of the same pair did not overlap there, and the 64-head
kernel is an ordinary launch, so neither could fail and neither is here. Shapes: N = 16 at T = 2 (clusters of 8)
and T = 16 (one CTA per split), both caches. Accuracy as in tests/ops/test_decode_gpu.py
(:func:`sparse_mla_testing.assert_attention_close`): ``||out - ref|| / ||ref|| < 1e-2``, LSE within
``1e-2 * max(1, |ref|)``; outputs poisoned (NaN) before the replay.
"""

import dataclasses

import pytest
import torch
import triton
import triton.language as tl
from triton.language.extra import cuda as tl_cuda

import sparse_mla_testing as testing
from sparse_mla.constants import DEEPSEEK_V32_SOFTMAX_SCALE
from sparse_mla.ops import decode

pytestmark = pytest.mark.skipif(not decode.is_available(), reason=f"decode kernel: {decode.is_available().reason}")

DELAY_NS = 20_000
"""How long the copy holds its dependents' CTAs at their wait before it writes."""

COPY_BLOCK = 1024


@triton.jit
def _late_copy_kernel(src, dst, n, delay_ns, BLOCK: tl.constexpr):
    tl_cuda.gdc_launch_dependents()
    start = tl_cuda.globaltimer()
    now = start
    while now - start < delay_ns:
        now = tl_cuda.globaltimer()
    for base in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offsets = base + tl.arange(0, BLOCK)
        tl.store(dst + offsets, tl.load(src + offsets, mask=offsets < n), mask=offsets < n)


def late_copy_(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst.copy_(src)`` (contiguous, same shape and dtype, rows a multiple of 4 bytes) by a kernel on the
    current stream that lets the next kernel launch first and writes after DELAY_NS."""
    assert dst.shape == src.shape and dst.dtype == src.dtype and dst.is_contiguous() and src.is_contiguous()
    assert dst.shape[-1] * dst.element_size() % 4 == 0, "copied as int32 words"
    words_dst, words_src = dst.view(torch.int32).view(-1), src.view(torch.int32).view(-1)
    programs = min(triton.cdiv(words_dst.numel(), COPY_BLOCK), torch.cuda.get_device_properties(dst.device).multi_processor_count)
    _late_copy_kernel[(programs,)](words_src, words_dst, words_dst.numel(), DELAY_NS, BLOCK=COPY_BLOCK)


def _stale_value(name: str, new: testing.AttentionCase, other: testing.AttentionCase) -> torch.Tensor:
    """Values of input ``name`` that differ from ``new``'s where the forward reads them."""
    stale = {
        "topk_indices": other.topk_indices,
        "req_id": new.req_id.flip(0),
        "token_kv_len": torch.clamp(new.token_kv_len // 3, min=1),
        "block_table": new.block_table.roll(1, dims=1),
        "kv_cache": other.kv_cache,
        "q_nope": other.q_nope,
    }[name]
    assert not torch.equal(stale, getattr(new, name)), f"stale {name} equals the new one: the test could not fail"
    return stale.contiguous().clone()


@pytest.mark.parametrize("name", ["topk_indices", "req_id", "token_kv_len", "block_table", "kv_cache", "q_nope"])
@pytest.mark.parametrize("cache_format", ["bf16", "fp8_ds_mla"])
@pytest.mark.parametrize("num_tokens, num_heads", [(2, 16), (16, 16)])
def test_reads_what_the_kernel_ahead_writes(num_tokens, num_heads, cache_format, name):
    """One graph of a copy that lets the forward start, then overwrites input ``name``, and the forward:
    the reference on the new values."""
    device = torch.device("cuda", torch.cuda.current_device())
    new = testing.make_attention_case(num_tokens, num_heads, device, seed=7, pattern="scattered", drop_fraction=0.1)
    other = testing.make_attention_case(num_tokens, num_heads, device, seed=8, pattern="scattered", drop_fraction=0.1)
    if cache_format == "fp8_ds_mla":
        new, other = testing.fp8_ds_mla_case(new), testing.fp8_ds_mla_case(other)
    stale = _stale_value(name, new, other)
    target = stale.clone()  # the input the copy overwrites with the new values
    inputs = dataclasses.replace(new, **{name: target})
    launch = decode.plan(num_tokens, num_heads, torch.cuda.get_device_properties(device).multi_processor_count,
                         fp8_ds_mla=cache_format == "fp8_ds_mla", head_tiles=1)  # at T = 16 not the swap-AB kernel
    assert launch.kernel == decode.NARROW_KERNEL, launch
    workspace = decode.workspace_for_plans([launch], device)
    out, lse = testing.poisoned_outputs(num_tokens, num_heads, device)
    fresh = getattr(new, name).contiguous()

    def step():
        late_copy_(target, fresh)
        decode.sparse_mla_decode(*inputs.inputs(), DEEPSEEK_V32_SOFTMAX_SCALE, launch, workspace, out=out, lse=lse)

    graph, _ = testing.capture_cuda_graph(step)
    target.copy_(stale)
    out.fill_(float("nan"))
    lse.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(target, fresh)
    testing.assert_attention_close(out, lse, *new.reference(), what=f"{name} written just ahead, {launch}")
