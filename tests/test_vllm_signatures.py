"""Where a real vLLM is installed: the adapter and the stand-in (``vllm_stand_in/``) against its classes.

Written for vLLM 0.33.0; with another version a difference here names what changed. Without vLLM the
tests are skipped (the stand-in's signatures were compared with vLLM 0.33.0's source when written).
Run this file in its own process: the adapter's CPU test puts the stand-in under the name ``vllm``.
"""

import ast
import inspect
import os

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="vLLM is not installed here")
STAND_IN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm_stand_in")
if os.path.abspath(vllm.__file__).startswith(STAND_IN):
    pytest.skip("the stand-in, not vLLM, is imported in this process", allow_module_level=True)

from vllm.v1.attention import backend as vllm_backend  # noqa: E402
from vllm.v1.attention.backends import registry as vllm_registry  # noqa: E402
from vllm.v1.attention.selector import AttentionSelectorConfig  # noqa: E402
from vllm.platforms.interface import DeviceCapability  # noqa: E402

from sparse_mla_vllm.backend import SparseMLAVllmBackend, SparseMLAVllmImpl, SparseMLAVllmMetadataBuilder  # noqa: E402


def _names(function) -> list:
    """Parameter names without self / cls, ``*`` / ``**`` marking variadic ones."""
    marks = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    params = inspect.signature(function).parameters.values()
    return [marks.get(p.kind, "") + p.name for p in params if p.name not in ("self", "cls")]


def _stand_in_signatures(relative_path: str) -> dict:
    """``{(class, method): names}`` of a stand-in module, read without importing it (the name ``vllm`` is taken)."""
    with open(os.path.join(STAND_IN, relative_path)) as f:
        tree = ast.parse(f.read())
    out = {}
    for node in ast.walk(tree):
        for owner, function in ([(node.name, f) for f in node.body] if isinstance(node, ast.ClassDef) else [("", node)]):
            if isinstance(function, ast.FunctionDef) and (owner or function in tree.body):
                a = function.args
                names = [x.arg for x in a.posonlyargs + a.args] + (["*" + a.vararg.arg] if a.vararg else [])
                names += [x.arg for x in a.kwonlyargs] + (["**" + a.kwarg.arg] if a.kwarg else [])
                out[(owner, function.name)] = [n for n in names if n not in ("self", "cls")]
    return out


@pytest.mark.parametrize("module, path", [(vllm_backend, "vllm/v1/attention/backend.py"),
                                          (vllm_registry, "vllm/v1/attention/backends/registry.py")])
def test_stand_in_matches_vllm(module, path):
    for (owner, name), names in _stand_in_signatures(path).items():
        real = getattr(getattr(module, owner), name) if owner else getattr(module, name)
        if owner and name == "__new__":
            continue  # vLLM's reads its process groups; the stand-in's is a single rank
        assert _names(real) == names, f"vLLM {vllm.__version__} {owner}.{name}{_names(real)}, stand-in {names}"


def test_adapter_takes_vllm_calls():
    version = vllm.__version__
    real_impl = _names(vllm_backend.MLAAttentionImpl.__init__)
    ours = inspect.signature(SparseMLAVllmImpl.__init__).parameters
    assert set(real_impl) <= set(ours), f"vLLM {version} passes {set(real_impl) - set(ours)} to the impl"
    extra = [n for n in ours if n not in real_impl and n != "self"]
    assert all(ours[n].default is None for n in extra), f"extra impl arguments {extra} need defaults"
    for ours_fn, real_fn in [
        (SparseMLAVllmImpl.forward_mqa, vllm_backend.MLAAttentionImpl.forward_mqa),
        (SparseMLAVllmMetadataBuilder.__init__, vllm_backend.AttentionMetadataBuilder.__init__),
        (SparseMLAVllmMetadataBuilder.build, vllm_backend.AttentionMetadataBuilder.build),
        (SparseMLAVllmBackend.get_supported_kernel_block_sizes, vllm_backend.AttentionBackend.get_supported_kernel_block_sizes),
        (SparseMLAVllmBackend.customize_spec, vllm_backend.AttentionBackend.customize_spec),
    ]:
        assert _names(ours_fn) == _names(real_fn), f"vLLM {version} {real_fn.__qualname__}{_names(real_fn)}"
    selector_config = AttentionSelectorConfig(576, torch.bfloat16, "bfloat16", 64, use_mla=True, use_sparse=True)
    reasons = SparseMLAVllmBackend.validate_configuration(device_capability=DeviceCapability(9, 0),
                                                         **selector_config._asdict())
    assert reasons == [], f"vLLM {version}'s selector call expected no reasons, got {reasons}"
