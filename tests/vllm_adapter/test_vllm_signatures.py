"""Where a real vLLM is installed: the adapter and the stand-in (``vllm_stand_in/``) against its classes.

Always: the stand-in against the signatures recorded from vLLM 0.33.0's source. Where vLLM is installed
(run this file in its own process: the adapter's CPU test puts the stand-in under the name ``vllm``): that
vLLM against the stand-in, and the adapter against its calls; a difference names what changed.
"""

import ast
import inspect
import os

import pytest
import torch

STAND_IN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm_stand_in")

VLLM_0_33_0 = {
    ("vllm/v1/attention/backend.py", "AttentionBackend", "get_supported_kernel_block_sizes"): ["kv_cache_spec"],
    ("vllm/v1/attention/backend.py", "AttentionBackend", "customize_spec"): ["spec"],
    ("vllm/v1/attention/backend.py", "AttentionBackend", "supports_compute_capability"): ["capability"],
    ("vllm/v1/attention/backend.py", "AttentionBackend", "supports_dcp"): [],
    ("vllm/v1/attention/backend.py", "AttentionBackend", "validate_configuration"): [
        "head_size", "dtype", "kv_cache_dtype", "block_size", "use_mla", "has_sink", "use_sparse", "use_mm_prefix",
        "use_per_head_quant_scales", "device_capability", "attn_type", "has_sliding_window", "use_non_causal",
        "use_batch_invariant", "use_kv_connector", "use_pcp", "use_adaptive_verification", "use_dcp", "use_rswa",
    ],
    ("vllm/v1/attention/backend.py", "AttentionMetadataBuilder", "__init__"):
        ["kv_cache_spec", "layer_names", "vllm_config", "device"],
    ("vllm/v1/attention/backend.py", "AttentionMetadataBuilder", "build"):
        ["common_prefix_len", "common_attn_metadata", "fast_build"],
    ("vllm/v1/attention/backend.py", "MLAAttentionImpl", "__init__"): [
        "num_heads", "head_size", "scale", "num_kv_heads", "alibi_slopes", "sliding_window", "kv_cache_dtype",
        "logits_soft_cap", "attn_type", "kv_sharing_target_layer_name", "q_lora_rank", "kv_lora_rank",
        "qk_nope_head_dim", "qk_rope_head_dim", "qk_head_dim", "v_head_dim", "kv_b_proj", "indexer", "q_pad_num_heads",
    ],
    ("vllm/v1/attention/backend.py", "MLAAttentionImpl", "forward_mqa"):
        ["q", "kv_c_and_k_pe_cache", "attn_metadata", "layer"],
    ("vllm/v1/attention/backend.py", "MLAAttentionImpl", "do_kv_cache_update"):
        ["kv_c_normed", "k_pe", "kv_cache", "slot_mapping", "kv_cache_dtype", "k_scale", "skip_scale"],
    ("vllm/v1/attention/backend.py", "AttentionImplBase", "prepare_for_batch"): ["attn_metadata"],
    ("vllm/v1/attention/backend.py", "AttentionMetadataBuilder", "_init_reorder_batch_threshold"):
        ["reorder_batch_threshold", "supports_spec_as_decode", "supports_dcp_with_varlen"],
    ("vllm/distributed/parallel_state.py", "", "get_dcp_world_size_and_rank"): ["enabled"],
    ("vllm/v1/attention/backends/registry.py", "AttentionBackendEnum", "register"): ["name", "value"],
    ("vllm/v1/attention/backends/registry.py", "", "register_backend"): ["backend", "class_path", "is_mamba"],
}
"""Parameter names (no self / cls) read from vLLM 0.33.0's source (wheel vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64,
commit 4ba787ec9) when the adapter was written."""

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


def test_stand_in_matches_vllm_0_33_0():
    """The stand-in's signatures are the ones recorded from vLLM 0.33.0's source."""
    for (path, owner, name), names in VLLM_0_33_0.items():
        stand_in = _stand_in_signatures(path).get((owner, name))
        assert stand_in == names, f"stand-in {path} {owner}.{name}{stand_in}, vLLM 0.33.0 {names}"


@pytest.fixture(scope="module")
def vllm():
    vllm = pytest.importorskip("vllm", reason="vLLM is not installed here")
    if os.path.abspath(vllm.__file__).startswith(STAND_IN):
        pytest.skip("the stand-in, not vLLM, is imported in this process")
    return vllm


def test_installed_vllm_matches_the_stand_in(vllm):
    """The installed vLLM's signatures against the stand-in's (which equal vLLM 0.33.0's)."""
    import importlib

    for path, owner, name in VLLM_0_33_0:
        module = importlib.import_module(path[: -len(".py")].replace("/", "."))
        real = getattr(getattr(module, owner), name) if owner else getattr(module, name)
        stand_in = _stand_in_signatures(path)[(owner, name)]
        assert _names(real) == stand_in, f"vLLM {vllm.__version__} {owner}.{name}{_names(real)}, stand-in {stand_in}"


def test_adapter_takes_installed_vllm_calls(vllm):
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention import backend as vllm_backend
    from vllm.v1.attention.selector import AttentionSelectorConfig

    from sparse_mla_vllm.backend import SparseMLAVllmBackend, SparseMLAVllmImpl, SparseMLAVllmMetadataBuilder

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


def test_adapter_serves_dcp_in_installed_vllm(vllm, monkeypatch):
    """The DCP wiring on the installed vLLM's own classes: the backend's answer, the selector call, and the
    impl and builder constructed as rank 1 of a DCP group of 2 (vLLM's ``parallel_state._DCP``)."""
    import types

    from vllm.distributed import parallel_state
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.selector import AttentionSelectorConfig
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    from sparse_mla.topk_filter import DcpShard
    from sparse_mla_vllm.backend import SparseMLAVllmBackend, SparseMLAVllmImpl, SparseMLAVllmMetadataBuilder

    assert SparseMLAVllmBackend.supports_dcp()
    selector_config = AttentionSelectorConfig(576, torch.bfloat16, "bfloat16", 64, use_mla=True, use_sparse=True,
                                              use_dcp=True)
    reasons = SparseMLAVllmBackend.validate_configuration(device_capability=DeviceCapability(9, 0),
                                                         **selector_config._asdict())
    assert reasons == [], f"vLLM {vllm.__version__}'s selector call with use_dcp expected no reasons, got {reasons}"
    monkeypatch.setattr(parallel_state, "_DCP", types.SimpleNamespace(world_size=2, rank_in_group=1))
    impl = SparseMLAVllmImpl(
        num_heads=8, head_size=576, scale=0.1, num_kv_heads=1, alibi_slopes=None, sliding_window=None,
        kv_cache_dtype="auto", logits_soft_cap=None, attn_type="decoder", kv_sharing_target_layer_name=None,
        q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, qk_head_dim=192,
        v_head_dim=128, kv_b_proj=None, topk_indices_buffer=torch.zeros(4, 2048, dtype=torch.int32),
    )
    assert (impl.dcp_world_size, impl.dcp_rank, impl.num_heads) == (2, 1, 16)
    assert impl.need_to_return_lse_for_decode and impl.lse_base_on_e and impl.supports_mtp_with_cp_non_trivial_interleave_size
    parallel = types.SimpleNamespace(tensor_parallel_size=2, decode_context_parallel_size=2,
                                     cp_kv_cache_interleave_size=8)
    config = types.SimpleNamespace(
        scheduler_config=types.SimpleNamespace(max_num_batched_tokens=8), parallel_config=parallel,
        additional_config={}, speculative_config=None,
        model_config=types.SimpleNamespace(hf_text_config=types.SimpleNamespace(index_topk=2048),
                                           get_num_attention_heads=lambda parallel_config: 8),
    )
    spec = MLAAttentionSpec(block_size=64, num_kv_heads=1, head_size=576, dtype=torch.bfloat16)
    builder = SparseMLAVllmMetadataBuilder(spec, ["layer"], config, torch.device("cpu"))
    assert builder.dcp == DcpShard(1, 2, 8) and builder.num_heads == 16
    assert builder.reorder_batch_threshold is None  # supports_dcp_with_varlen: vLLM keeps every step whole
