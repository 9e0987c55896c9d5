"""The attention layers of one DeepSeek-V3.2 decode step as an engine runs them, for ``tools/model_step_bench.py``:
per layer the indexer's top-k (:mod:`sparse_mla_testing.stand_in_indexer`), the KV write of the step's new tokens
(:func:`sparse_mla.kernels.kv_cache_writer.write_kv`) and the routed forward (:class:`sparse_mla.backend.SparseMLAImpl`).

The layers share what an engine's layers share: the step's metadata (one build), hence its block table and slot
mapping, and the top-k buffer that each layer's indexer writes and its forward reads. Each layer has its own
queries, new KV rows and output, and a cache: layer ``l`` uses ``layers[l % len(layers)]`` (a rotating set when
there are fewer caches than layers). No host synchronization anywhere, so the sequence captures in one CUDA graph
on one stream, where a kernel launched with programmatic dependent launch may overlap its predecessor.
"""

import dataclasses
from typing import Callable, List, Sequence

import torch

import sparse_mla_testing as testing
from sparse_mla.backend import SparseMLAImpl, SparseMLAMetadata
from sparse_mla.constants import DEEPSEEK_V32_SOFTMAX_SCALE, KV_LORA_RANK, QK_ROPE_HEAD_DIM
from sparse_mla.kernels.kv_cache_writer import write_kv
from sparse_mla_testing.stand_in_indexer import write_shifted_rows


@dataclasses.dataclass
class LayerInputs:
    """What one layer reads and writes apart from the step's shared buffers."""

    kv_cache: torch.Tensor  # [num_blocks, 64, 576] bf16 or [num_blocks, 64, 656] uint8
    kv_c_normed: torch.Tensor  # [T, 512] bf16, the new tokens' latent
    k_pe: torch.Tensor  # [T, 64] bf16, the new tokens' rotary keys
    q_nope: torch.Tensor  # [T, N, 512] bf16
    q_rope: torch.Tensor  # [T, N, 64] bf16
    out: torch.Tensor  # [T, N, 512] bf16


@dataclasses.dataclass
class ModelStep:
    """One decode step of ``num_layers`` layers (module docstring)."""

    num_layers: int
    impl: SparseMLAImpl
    metadata: SparseMLAMetadata
    rows: torch.Tensor  # [T, K] int32, the step's top-k rows before each layer's shift
    shifts: torch.Tensor  # [L, T] int32, each layer's shift of them
    token_kv_len: torch.Tensor  # [T] int32
    slot_mapping: torch.Tensor  # [T] int64, where the new tokens go
    topk: torch.Tensor  # [T, K] int32, written by each layer's indexer, read by its forward
    layers: List[LayerInputs]  # one per cache; layer l uses layers[l % len(layers)]

    def inputs_of(self, layer: int) -> LayerInputs:
        return self.layers[layer % len(self.layers)]


def make_model_step(
    batch: testing.SparseMLABatch,
    metadata: SparseMLAMetadata,
    kv_caches: Sequence[torch.Tensor],
    num_layers: int,
    generator: torch.Generator,
) -> ModelStep:
    """A step of ``num_layers`` layers over ``batch`` (its rows are the indexer's before the shifts).

    Parameters
    ----------
    batch : SparseMLABatch
        The step's requests; its block table must fit every cache of ``kv_caches``.
    metadata : SparseMLAMetadata
        ``batch``'s step built for the caches' format and the layers' head count.
    kv_caches : sequence of torch.Tensor
        The layers' caches, of one format and shape; fewer than ``num_layers`` are rotated.
    num_layers : int
        ``L >= 1``.
    generator : torch.Generator
        Draws the shifts, queries and new KV rows, on the caches' device.

    Raises
    ------
    ValueError
        ``num_layers < 1`` or no cache.
    """
    if num_layers < 1 or not kv_caches:
        raise ValueError(f"sparse_mla: expected num_layers >= 1 and caches, got {num_layers} and {len(kv_caches)}")
    device, num_tokens, num_heads = generator.device, batch.num_tokens, metadata.num_heads
    layers = []
    for kv_cache in kv_caches:
        new = torch.randn(num_tokens, KV_LORA_RANK + QK_ROPE_HEAD_DIM, generator=generator, device=device)
        new = new.to(torch.bfloat16)
        q_nope, q_rope = testing.make_queries(num_tokens, num_heads, device, generator)
        out = torch.empty(num_tokens, num_heads, KV_LORA_RANK, dtype=torch.bfloat16, device=device)
        layers.append(LayerInputs(kv_cache, new[:, :KV_LORA_RANK], new[:, KV_LORA_RANK:], q_nope, q_rope, out))
    high = max(batch.seq_lens)
    return ModelStep(
        num_layers=num_layers,
        impl=SparseMLAImpl(num_heads, DEEPSEEK_V32_SOFTMAX_SCALE, kv_cache_dtype=metadata.kv_cache_format),
        metadata=metadata,
        rows=batch.topk_indices,
        shifts=torch.randint(0, high, (num_layers, num_tokens), generator=generator, device=device, dtype=torch.int32),
        token_kv_len=batch.token_kv_len,
        slot_mapping=batch.slot_mapping,
        topk=torch.empty_like(batch.topk_indices),
        layers=layers,
    )


def layer_calls(step: ModelStep, attention: bool = True) -> List[Callable[[], None]]:
    """One zero-argument call per layer, in order: its indexer, its KV write, then (``attention``) its forward."""

    def layer_call(layer: int) -> Callable[[], None]:
        inputs = step.inputs_of(layer)

        def call() -> None:
            write_shifted_rows(step.rows, step.shifts[layer], step.token_kv_len, step.topk)
            write_kv(inputs.kv_c_normed, inputs.k_pe, inputs.kv_cache, step.slot_mapping)
            if attention:
                step.impl.forward((inputs.q_nope, inputs.q_rope), inputs.kv_cache, step.metadata, step.topk,
                                  output=inputs.out)

        return call

    return [layer_call(layer) for layer in range(step.num_layers)]
