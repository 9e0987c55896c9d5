"""Checks the installed sparse-mla wheel's op libraries in this interpreter's torch (no GPU needed).

    python check_wheel.py REPO_ROOT

For each stable-ABI library of the wheel: it lies in the installed package and sparse_mla finds it
there; it references no symbol of libtorch's C++ API (only the stable C shim); torch.ops.load_library
loads it; every op its sources define (m.def in cc/) is registered with exactly that schema, and each
op its sources implement for CUDA has a CUDA kernel; the decode library's host-only op (the workspace
layout of a plan, int[] in and out) answers and, called as the package calls its ops
(``sparse_mla.ops.library.call_op``), refuses a bad plan with a ValueError naming it. Exits non-zero naming the
first failure.
"""

import re
import subprocess
import sys
from pathlib import Path

import torch

from sparse_mla.ops import decode
from sparse_mla.ops.library import call_op, library_path

STABLE_LIBRARIES = {
    decode.LIBRARY_NAME: (decode.LIBRARY_ENV, ["cc/decode/decode_op.cc", "cc/metadata/token_metadata_op.cc"]),
}
"""The wheel's stable-ABI libraries: the environment variable that would override them, their op sources."""

CPP_API_SYMBOL = re.compile(r"\b_ZN?K?(2at|3c10|5torch)\w*")
"""Mangled names in namespaces at::, c10:: or torch:: (libtorch's C++ API, not ABI-stable)."""

LIBRARY_BLOCK = re.compile(r"STABLE_TORCH_LIBRARY(_FRAGMENT|_IMPL)?\((\w+), (?:(\w+), )?m\) \{([^{}]*)\}")
DEF = re.compile(r'm\.def\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\)')
IMPL = re.compile(r'm\.impl\("(\w+)"')


def defined_ops(source: str):
    """``(schemas, {op: dispatch keys it is implemented for})`` of one op source."""
    schemas, impls = [], {}
    for kind, namespace, key, body in LIBRARY_BLOCK.findall(source):
        if kind == "_IMPL":
            for op in IMPL.findall(body):
                impls.setdefault(f"{namespace}::{op}", []).append(key)
        else:
            for literals in DEF.findall(body):
                schemas.append(f"{namespace}::" + "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', literals)))
    return schemas, impls


def check(root: Path) -> None:
    print(f"torch {torch.__version__}")
    for name, (env, sources) in STABLE_LIBRARIES.items():
        path = library_path(name, env)
        installed = Path(decode.__file__).resolve().parent.parent / name
        assert path is not None and path.resolve() == installed, f"{name}: found at {path}, expected {installed}"
        undefined = subprocess.run(["nm", "-D", "--undefined-only", str(path)], check=True, capture_output=True,
                                   text=True).stdout
        cpp = sorted(set(m.group(0) for m in CPP_API_SYMBOL.finditer(undefined)))
        assert not cpp, f"{name} uses libtorch's C++ API, not only the stable ABI: {cpp[:5]}"
        torch.ops.load_library(str(path))
        for source in sources:
            schemas, impls = defined_ops((root / source).read_text())
            assert schemas or impls, f"{source}: no op definition found"
            for schema in schemas:
                op = schema.split("(")[0]
                namespace, op_name = op.split("::")
                registered = str(getattr(getattr(torch.ops, namespace), op_name).default._schema)
                assert registered == schema, f"{op}: registered {registered}, {source} defines {schema}"
                print(f"  {registered}")
            for op, keys in impls.items():
                for key in keys:
                    assert torch._C._dispatch_has_kernel_for_dispatch_key(op, key), f"{op}: no {key} kernel"
        print(f"{name}: loaded from {path}, ops registered with their schemas")
    check_workspace_layout()


def check_workspace_layout() -> None:
    """The plan value and the layout cross the stable ABI as int lists in this torch too, and an argument error
    reaches the package's caller as ValueError (from torch 2.15 the op itself raises RuntimeError)."""
    layout = decode.workspace_layout(decode.plan(1, 16, 132))
    assert 0 < layout.partial_out_offset < layout.partial_lse_offset < layout.total_bytes, layout
    try:
        call_op(torch.ops.sparse_mla_decode.workspace_layout, [])
    except ValueError as error:
        assert "argument 'plan'" in str(error), error
    else:
        raise AssertionError("sparse_mla_decode::workspace_layout accepted an empty plan")
    print(f"  workspace_layout of a plan: {tuple(layout)}")


if __name__ == "__main__":
    check(Path(sys.argv[1]))
