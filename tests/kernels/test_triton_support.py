"""The interpreter workarounds (bf16 ``tl.dot`` in fp32, fp32 -> bf16 rounding by bits) give the right
values wherever the kernel runs."""

import pytest
import torch
import triton
import triton.language as tl

import sparse_mla_testing as testing
from sparse_mla_testing.markers import requires_triton_device
from sparse_mla.kernels.triton_support import bf16_rne, dot_in_fp32, interpreting, kernel_device_type

pytestmark = requires_triton_device

TILE = 16
MAX_REL_ERR = 1e-2


@triton.jit
def _bf16_dot_kernel(a_ptr, b_ptr, c_ptr, TILE: tl.constexpr, DOT_FP32: tl.constexpr):
    rows = tl.arange(0, TILE)
    offsets = rows[:, None] * TILE + rows[None, :]
    a = tl.load(a_ptr + offsets)
    b = tl.load(b_ptr + offsets)
    if DOT_FP32:
        a, b = a.to(tl.float32), b.to(tl.float32)
    tl.store(c_ptr + offsets, tl.dot(a, b))


def test_flags_follow_the_interpreter():
    assert dot_in_fp32() == interpreting()
    assert kernel_device_type() == ("cpu" if interpreting() else "cuda")


def test_bf16_dot_with_the_flag_is_right():
    device = torch.device(kernel_device_type())
    gen = testing.make_generator(device, seed=40)
    a = torch.randn(TILE, TILE, generator=gen, device=device).to(torch.bfloat16)
    b = torch.randn(TILE, TILE, generator=gen, device=device).to(torch.bfloat16)
    c = torch.full((TILE, TILE), float("nan"), device=device)
    _bf16_dot_kernel[(1,)](a, b, c, TILE=TILE, DOT_FP32=dot_in_fp32())
    ref = a.float() @ b.float()
    rel = testing.relative_error(c, ref)
    assert rel < MAX_REL_ERR, f"bf16 tl.dot relative error {rel:.2e} expected < {MAX_REL_ERR}"


@triton.jit
def _round_kernel(x_ptr, out_ptr, N: tl.constexpr):
    offsets = tl.arange(0, N)
    tl.store(out_ptr + offsets, bf16_rne(tl.load(x_ptr + offsets)))


def test_bf16_rne_rounds_like_torch():
    """fp32 -> bf16 to nearest-even (ties included) over 60 decades, as torch's conversion and the GPU's."""
    device = torch.device(kernel_device_type())
    x = torch.randn(1 << 14, generator=torch.Generator().manual_seed(0)) * torch.logspace(-30, 30, 1 << 14)
    x[:4] = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), 0.0])  # ties to even: down, up, down
    out = torch.empty_like(x, device=device)
    _round_kernel[(1,)](x.to(device), out, N=1 << 14)
    assert torch.equal(out.cpu(), x.to(torch.bfloat16).float())
