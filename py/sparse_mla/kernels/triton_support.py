"""What every Triton kernel of this package needs to know about how it is being run.

Triton's interpreter (``TRITON_INTERPRET=1``, how the CPU tests run the kernels) computes
``tl.dot`` wrongly when both operands are bf16: with triton 3.6.0 and 3.9.0 a 16x16x16 bf16 product
comes out with a relative error of order 1e9, while fp16 and fp32 operands are right. Compiled kernels on
the GPU are not affected. This module is the one place that works around it: a kernel that calls
``tl.dot`` on bf16 values takes a ``DOT_FP32: tl.constexpr`` flag, its wrapper passes
:func:`dot_in_fp32`, and the kernel upcasts both operands to fp32 before the ``tl.dot`` when the flag is
set. On the GPU the flag is off and the tensor cores see bf16.

Example
-------
>>> @triton.jit
... def kernel(..., DOT_FP32: tl.constexpr):
...     if DOT_FP32:
...         a, b = a.to(tl.float32), b.to(tl.float32)
...     acc = tl.dot(a, b, acc)
>>> kernel[grid](..., DOT_FP32=dot_in_fp32())

The interpreter also truncates fp32 -> bf16 conversions (:func:`round_bf16_by_bits`): a kernel whose
accuracy depends on that rounding takes a ``BF16_BY_BITS`` constexpr and rounds with :func:`bf16_rne`
there, keeping the result in fp32.
"""

import triton
import triton.language as tl


def interpreting() -> bool:
    """Whether Triton kernels run in its interpreter (``TRITON_INTERPRET`` set, read by Triton itself)."""
    return bool(triton.knobs.runtime.interpret)


def dot_in_fp32() -> bool:
    """The ``DOT_FP32`` constexpr: upcast bf16 ``tl.dot`` operands to fp32 (only in the interpreter)."""
    return interpreting()


def kernel_device_type() -> str:
    """Device type the kernels' tensors must live on: ``"cpu"`` in the interpreter, ``"cuda"`` otherwise.

    Pass it as ``device=`` to :func:`sparse_mla.checks.check_tensor`, so a CPU tensor given to a compiled
    kernel fails with the argument's name instead of Triton's pointer error.
    """
    return "cpu" if interpreting() else "cuda"


def round_bf16_by_bits() -> bool:
    """The ``BF16_BY_BITS`` constexpr: round fp32 to bf16 with :func:`bf16_rne` (only in the interpreter).

    Triton's interpreter (triton 3.6.0) truncates fp32 -> bf16 conversions toward zero, and ignores
    ``fp_downcast_rounding="rtne"``; compiled kernels round to nearest-even. The truncation biases every
    rounded value by about -2**-9 relative, which doubles a kernel's error against an fp32 reference.
    """
    return interpreting()


@triton.jit
def bf16_rne(x):
    """fp32 ``x`` rounded to the nearest-even bf16 value, kept in fp32 (finite ``x``): add half of the 16
    dropped bits, plus the lowest kept bit for ties, then clear them. What the GPU's ``x.to(tl.bfloat16)`` gives."""
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536  # -65536 = 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)
