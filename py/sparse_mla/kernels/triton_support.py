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
"""

import triton


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
