"""Random sparse-MLA batches for the tests and the benchmark (not part of the sparse_mla package).

Everything is drawn from a seeded generator on the target device, with non-zero values, so that
unwritten outputs and wrong indexing show up as errors.
"""

import dataclasses
from typing import Callable, List, Optional, Sequence, Tuple, TypeVar

import torch

from sparse_mla.common_metadata import CommonAttentionMetadata
from sparse_mla import reference
from sparse_mla.fp8_ds_mla import quantize_slots
from sparse_mla.reference import topk_to_slots_reference
from sparse_mla.constants import (
    DEEPSEEK_V32_SOFTMAX_SCALE,
    INDEX_TOPK,
    KV_BLOCK_SIZE,
    KV_CACHE_HEAD_SIZE,
    KV_LORA_RANK,
)

INVALID_PATTERNS = ("end", "start", "scattered")
"""Where the -1 entries of a top-k row sit: after the valid ones, before them, or shuffled in."""


def make_generator(device: torch.device, seed: int) -> torch.Generator:
    """A generator on ``device`` seeded with ``seed``."""
    return torch.Generator(device=device).manual_seed(seed)


def make_kv_cache(num_blocks: int, device: torch.device, generator: torch.Generator) -> torch.Tensor:
    """`[num_blocks, 64, 576]` bf16 cache of standard-normal values."""
    shape = (num_blocks, KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE)
    return torch.randn(shape, generator=generator, device=device).to(torch.bfloat16)


def fp8_ds_mla_kv_cache(kv_cache: torch.Tensor) -> torch.Tensor:
    """The fp8_ds_mla cache of a bf16 cache: every slot quantized by :func:`sparse_mla.fp8_ds_mla.quantize_slots`.

    Returns
    -------
    torch.Tensor
        `[num_blocks, 64, 656]` uint8.
    """
    flat = kv_cache.reshape(-1, KV_CACHE_HEAD_SIZE)
    slots = quantize_slots(flat[:, :KV_LORA_RANK], flat[:, KV_LORA_RANK:])
    return slots.view(kv_cache.shape[0], KV_BLOCK_SIZE, -1)


def padded_kv_cache(kv_cache: torch.Tensor, block_padding: int) -> torch.Tensor:
    """A copy of ``kv_cache`` whose blocks lie ``64 * slot_width + block_padding`` elements apart, as in a
    vLLM cache that shares its pages with other layers. The gaps hold NaN (bf16), or bytes 0xFF in a uint8
    fp8_ds_mla cache (NaN fp8 codes and NaN scales), so reading one poisons the result.

    Returns
    -------
    torch.Tensor
        `[num_blocks, 64, slot_width]` of ``kv_cache``'s dtype with strides
        `(64 * slot_width + block_padding, slot_width, 1)`.
    """
    num_blocks, _, slot_width = kv_cache.shape
    block_elems = KV_BLOCK_SIZE * slot_width
    poison = 0xFF if kv_cache.dtype == torch.uint8 else float("nan")
    storage = torch.full((num_blocks, block_elems + block_padding), poison, dtype=kv_cache.dtype,
                         device=kv_cache.device)
    padded = storage[:, :block_elems].view(num_blocks, KV_BLOCK_SIZE, slot_width)
    padded.copy_(kv_cache)
    return padded


def transposed_copy(q: torch.Tensor) -> torch.Tensor:
    """``q`` `[T, N, D]` stored head-major, as vLLM's ``ql_nope`` (a `[N, T, D]` bmm result viewed as
    `[T, N, D]`): equal values, strides `(D, T * D, 1)`."""
    return q.transpose(0, 1).contiguous().transpose(0, 1)


def make_queries(
    num_tokens: int, num_heads: int, device: torch.device, generator: torch.Generator
) -> Tuple[torch.Tensor, torch.Tensor]:
    """`(q_nope [T, N, 512], q_rope [T, N, 64])` bf16 standard-normal queries."""
    q = torch.randn(num_tokens, num_heads, KV_CACHE_HEAD_SIZE, generator=generator, device=device)
    q = q.to(torch.bfloat16)
    return q[..., :KV_LORA_RANK], q[..., KV_LORA_RANK:]


def make_topk_indices(
    token_kv_len: torch.Tensor,
    topk: int,
    generator: torch.Generator,
    pattern: str = "end",
    drop_fraction: float = 0.0,
) -> torch.Tensor:
    """Distinct random positions below each token's length, `-1` where there are fewer than ``topk``.

    Parameters
    ----------
    token_kv_len : torch.Tensor
        `[T]` integer causal length of each token.
    topk : int
        Row width K.
    generator : torch.Generator
        On the device of ``token_kv_len``.
    pattern : str
        One of :data:`INVALID_PATTERNS`.
    drop_fraction : float
        Fraction of the valid entries additionally replaced by ``-1`` (holes inside the row).

    Returns
    -------
    torch.Tensor
        `[T, K]` int32.
    """
    if pattern not in INVALID_PATTERNS:
        raise ValueError(f"sparse_mla: argument 'pattern' expected one of {INVALID_PATTERNS}, got {pattern!r}")
    device = token_kv_len.device
    num_tokens = token_kv_len.shape[0]
    width = max(int(token_kv_len.max()) if num_tokens else 1, topk)
    keys = torch.rand(num_tokens, width, generator=generator, device=device)
    beyond = torch.arange(width, device=device)[None, :] >= token_kv_len[:, None]
    keys = keys.masked_fill(beyond, 2.0)  # positions past the length sort last
    picked = keys.argsort(dim=1)[:, :topk]
    picked_keys = torch.gather(keys, 1, picked)
    drop = torch.rand(num_tokens, topk, generator=generator, device=device) < drop_fraction
    indices = picked.masked_fill((picked_keys > 1.0) | drop, -1)
    if pattern == "start":
        indices = indices.flip(1)
    elif pattern == "scattered":
        shuffle = torch.rand(num_tokens, topk, generator=generator, device=device).argsort(dim=1)
        indices = torch.gather(indices, 1, shuffle)
    return indices.to(torch.int32)


@dataclasses.dataclass
class SparseMLABatch:
    """One step of several requests, each with ``query_lens[r]`` new tokens ending at ``seq_lens[r]``."""

    seq_lens: List[int]  # per request, context including this step's tokens
    query_lens: List[int]  # per request, tokens of this step
    query_start_loc: torch.Tensor  # [R + 1] int32
    block_table: torch.Tensor  # [R, max_blocks] int32, distinct random blocks
    req_id: torch.Tensor  # [T] int32
    token_kv_len: torch.Tensor  # [T] int32, causal length of each token
    positions: torch.Tensor  # [T] int64, position of each token inside its request
    slot_mapping: torch.Tensor  # [T] int64, cache slot each new token is written to
    topk_indices: torch.Tensor  # [T, K] int32, request-local positions, -1 = none

    @property
    def num_tokens(self) -> int:
        return int(sum(self.query_lens))


def make_batch(
    seq_lens: Sequence[int],
    query_lens: Sequence[int],
    num_blocks: int,
    generator: torch.Generator,
    topk: int = INDEX_TOPK,
    pattern: str = "end",
    drop_fraction: float = 0.0,
    contiguous_blocks: bool = False,
) -> SparseMLABatch:
    """Block tables, positions, slot mapping and top-k rows for a batch of requests.

    Token ``i`` of request ``r`` sits at position ``seq_lens[r] - query_lens[r] + i`` and may attend
    the positions below ``position + 1`` (causal). Blocks are a random permutation of the cache, as
    in an engine after much allocation churn, or with ``contiguous_blocks`` consecutive per request
    from a random start (a fresh engine; on the H200 both run equally fast).

    Raises
    ------
    ValueError
        If the requests need more than ``num_blocks`` blocks, or a query is longer than its sequence.
    """
    device = generator.device
    if len(seq_lens) != len(query_lens):
        raise ValueError(f"sparse_mla: 'seq_lens' and 'query_lens' expected equal lengths, got {len(seq_lens)} and {len(query_lens)}")
    for s, q in zip(seq_lens, query_lens):
        if not 0 < q <= s:
            raise ValueError(f"sparse_mla: expected 0 < query_len <= seq_len, got query_len {q}, seq_len {s}")
    blocks_per_req = [-(-s // KV_BLOCK_SIZE) for s in seq_lens]
    max_blocks = max(blocks_per_req)
    if sum(blocks_per_req) > num_blocks:
        raise ValueError(f"sparse_mla: the batch needs {sum(blocks_per_req)} cache blocks, got num_blocks {num_blocks}")
    if contiguous_blocks:
        first = int(torch.randint(0, num_blocks - sum(blocks_per_req) + 1, (1,), generator=generator, device=device))
        pool = torch.arange(first, first + sum(blocks_per_req), device=device, dtype=torch.int32)
    else:
        pool = torch.randperm(num_blocks, generator=generator, device=device).to(torch.int32)
    block_table = torch.zeros(len(seq_lens), max_blocks, dtype=torch.int32, device=device)
    start = 0
    for r, n in enumerate(blocks_per_req):
        block_table[r, :n] = pool[start : start + n]
        start += n
    req_id = torch.repeat_interleave(
        torch.arange(len(seq_lens), device=device), torch.tensor(list(query_lens), device=device)
    )
    positions = torch.cat(
        [torch.arange(s - q, s, device=device) for s, q in zip(seq_lens, query_lens)]
    )
    token_kv_len = (positions + 1).to(torch.int32)
    block_of_token = torch.gather(block_table[req_id], 1, (positions // KV_BLOCK_SIZE)[:, None])[:, 0]
    slot_mapping = block_of_token.long() * KV_BLOCK_SIZE + positions % KV_BLOCK_SIZE
    query_start_loc = torch.zeros(len(seq_lens) + 1, dtype=torch.int32, device=device)
    query_start_loc[1:] = torch.cumsum(torch.tensor(list(query_lens), device=device), 0)
    topk_indices = make_topk_indices(token_kv_len, topk, generator, pattern, drop_fraction)
    return SparseMLABatch(
        seq_lens=list(seq_lens),
        query_lens=list(query_lens),
        query_start_loc=query_start_loc,
        block_table=block_table,
        req_id=req_id.to(torch.int32),
        token_kv_len=token_kv_len,
        positions=positions,
        slot_mapping=slot_mapping,
        topk_indices=topk_indices,
    )


def common_metadata(
    batch: SparseMLABatch,
    num_actual_tokens: Optional[int] = None,
    num_padded_reqs: int = 0,
    block_table: Optional[torch.Tensor] = None,
) -> CommonAttentionMetadata:
    """The engine's view of ``batch``, optionally CUDA-graph padded.

    Parameters
    ----------
    batch : SparseMLABatch
        The real requests.
    num_actual_tokens : int, optional
        Padded token count (>= ``batch.num_tokens``); padded tokens get slot -1.
    num_padded_reqs : int
        Extra request slots that repeat the last ``query_start_loc`` and have ``seq_len`` 0.
    block_table : torch.Tensor, optional
        `[R + num_padded_reqs, max_blocks]` int32; by default the batch's, padded rows copying row 0.
    """
    device = batch.query_start_loc.device
    query_start_loc = torch.cat([batch.query_start_loc, batch.query_start_loc[-1:].repeat(num_padded_reqs)])
    seq_lens = torch.tensor(batch.seq_lens + [0] * num_padded_reqs, dtype=torch.int32, device=device)
    num_tokens = batch.num_tokens if num_actual_tokens is None else num_actual_tokens
    slot_mapping = torch.full((num_tokens,), -1, dtype=torch.int64, device=device)
    slot_mapping[: batch.num_tokens] = batch.slot_mapping
    if block_table is None:
        block_table = torch.cat([batch.block_table, batch.block_table[:1].repeat(num_padded_reqs, 1)])
    return _engine_step(query_start_loc, seq_lens, slot_mapping, block_table)


def make_common_metadata(
    seq_lens: List[int],
    query_lens: List[int],
    num_actual_tokens: Optional[int] = None,
    num_padded_reqs: int = 0,
    max_blocks: int = 4,
    device: torch.device = torch.device("cpu"),
) -> CommonAttentionMetadata:
    """An engine step of requests with ``seq_lens`` / ``query_lens``, without a cache behind it (for the
    builder alone): ``num_actual_tokens`` pads the token count (CUDA graphs), ``num_padded_reqs`` adds
    request slots that repeat the last query start and have seq_len 0; block table rows count up."""
    seq_lens = list(seq_lens) + [0] * num_padded_reqs
    query_lens = list(query_lens) + [0] * num_padded_reqs
    starts = [0]
    for q in query_lens:
        starts.append(starts[-1] + q)
    num_tokens = starts[-1] if num_actual_tokens is None else num_actual_tokens
    int32 = dict(dtype=torch.int32, device=device)
    return _engine_step(
        torch.tensor(starts, **int32), torch.tensor(seq_lens, **int32),
        torch.arange(num_tokens, dtype=torch.int64, device=device),
        torch.arange(len(seq_lens) * max_blocks, **int32).view(-1, max_blocks),
    )


def _engine_step(query_start_loc: torch.Tensor, seq_lens: torch.Tensor, slot_mapping: torch.Tensor,
                 block_table: torch.Tensor) -> CommonAttentionMetadata:
    """The one constructor of both builders above: host copies and maxima from the device tensors
    (``query_start_loc`` `[R + 1]`, ``seq_lens`` `[R]` int32; ``slot_mapping`` `[T]` int64, its length the
    padded token count)."""
    query_start_loc_cpu, seq_lens_cpu = query_start_loc.cpu(), seq_lens.cpu()
    query_lens = query_start_loc_cpu[1:] - query_start_loc_cpu[:-1]
    return CommonAttentionMetadata(
        query_start_loc=query_start_loc,
        query_start_loc_cpu=query_start_loc_cpu,
        seq_lens=seq_lens,
        seq_lens_cpu=seq_lens_cpu,
        num_reqs=seq_lens.shape[0],
        num_actual_tokens=slot_mapping.shape[0],
        max_query_len=int(query_lens.max()) if len(query_lens) else 0,
        max_seq_len=int(seq_lens_cpu.max()) if len(seq_lens_cpu) else 0,
        slot_mapping=slot_mapping,
        block_table_tensor=block_table,
    )


def relative_error(out: torch.Tensor, ref: torch.Tensor, chunk: int = 1 << 24) -> float:
    """``‖out − ref‖ / ‖ref‖`` in float64, summed over slices of ``chunk`` elements (a float64 copy of a whole
    large output, 17 GB at T = 32776, N = 128, does not fit beside the suite on an 80 GB H100); NaN or inf
    anywhere in ``out`` gives ``inf``. ``out`` and ``ref`` broadcast against each other."""
    out, ref = (x.reshape(-1) for x in torch.broadcast_tensors(out, ref))
    diff_sq = ref_sq = torch.zeros((), dtype=torch.float64, device=out.device)
    for start in range(0, out.numel(), chunk):
        out64, ref64 = out[start:start + chunk].double(), ref[start:start + chunk].double()
        if not torch.isfinite(out64).all():
            return float("inf")
        diff_sq = diff_sq + (out64 - ref64).square().sum()
        ref_sq = ref_sq + ref64.square().sum()
    return float(diff_sq.sqrt() / ref_sq.sqrt().clamp_min(1e-30))


def assert_slots_match_reference(
    topk_indices: torch.Tensor,
    req_id: torch.Tensor,
    token_kv_len: torch.Tensor,
    block_table: torch.Tensor,
    num_blocks: int,
    slot_ids: torch.Tensor,
    valid_count: torch.Tensor,
) -> None:
    """Assert an index conversion's output equals :func:`~sparse_mla.reference.topk_to_slots_reference`'s
    exactly, naming the first mismatching (token, column) entries."""
    ref_slots, ref_count = topk_to_slots_reference(topk_indices, req_id, token_kv_len, block_table, num_blocks)
    assert torch.equal(valid_count, ref_count), f"valid_count expected {ref_count.tolist()}, got {valid_count.tolist()}"
    mismatched = (slot_ids != ref_slots).nonzero()
    assert len(mismatched) == 0, f"slot_ids differ from the reference at (token, column) {mismatched[:5].tolist()}"


ATTENTION_CONTEXTS = (32768, 1500, 20000, 700)
"""Request lengths of :func:`make_attention_case`: two longer than top-k 2048, two shorter."""

ATTENTION_REL_TOL = 1e-2
"""Output bound ``||out - ref|| / ||ref||`` for bf16 operands with fp32 accumulation (measured ~2e-3)."""

ATTENTION_LSE_TOL = 1e-2
"""LSE bound, relative to ``max(1, |ref|)``."""


@dataclasses.dataclass
class AttentionCase:
    """Inputs of one attention call over request-local top-k positions, and its fp32 reference."""

    q_nope: torch.Tensor  # [T, N, 512] bf16
    q_rope: torch.Tensor  # [T, N, 64] bf16
    kv_cache: torch.Tensor  # [num_blocks, 64, 576] bf16
    topk_indices: torch.Tensor  # [T, 2048] int32
    req_id: torch.Tensor  # [T] int32
    token_kv_len: torch.Tensor  # [T] int32
    block_table: torch.Tensor  # [R, max_blocks] int32

    @property
    def num_blocks(self) -> int:
        return self.kv_cache.shape[0]

    def inputs(self) -> Tuple[torch.Tensor, ...]:
        """``(q_nope, q_rope, kv_cache, topk_indices, req_id, token_kv_len, block_table)``."""
        return (self.q_nope, self.q_rope, self.kv_cache, self.topk_indices, self.req_id, self.token_kv_len, self.block_table)

    def reference(self, softmax_scale: float = DEEPSEEK_V32_SOFTMAX_SCALE) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(out [T, N, 512] fp32, lse [T, N] fp32)`` of :func:`sparse_mla.reference.sparse_mla_reference`."""
        slot_ids = reference.global_slot_ids_reference(
            self.topk_indices, self.req_id, self.token_kv_len, self.block_table, self.num_blocks
        )
        return reference.sparse_mla_reference(self.q_nope, self.q_rope, self.kv_cache, slot_ids, softmax_scale)


def make_attention_case(
    num_tokens: int, num_heads: int, device: torch.device, seed: int, pattern: str = "end", drop_fraction: float = 0.0
) -> AttentionCase:
    """Up to four requests of :data:`ATTENTION_CONTEXTS` positions sharing ``num_tokens`` query tokens
    (several tokens of one request are speculative / prefill tokens with their own causal lengths),
    with 64 spare cache blocks nobody uses."""
    num_reqs = min(num_tokens, len(ATTENTION_CONTEXTS))
    query_lens = [num_tokens // num_reqs + (r < num_tokens % num_reqs) for r in range(num_reqs)]
    seq_lens = [max(length, q) for length, q in zip(ATTENTION_CONTEXTS, query_lens)]
    num_blocks = sum(-(-s // KV_BLOCK_SIZE) for s in seq_lens) + 64
    gen = make_generator(device, seed)
    batch = make_batch(seq_lens, query_lens, num_blocks, gen, topk=INDEX_TOPK, pattern=pattern, drop_fraction=drop_fraction)
    kv_cache = make_kv_cache(num_blocks, device, gen)
    q_nope, q_rope = make_queries(num_tokens, num_heads, device, gen)
    return AttentionCase(q_nope, q_rope, kv_cache, batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table)


def fp8_ds_mla_case(case: AttentionCase) -> AttentionCase:
    """``case`` on the fp8_ds_mla cache of its bf16 cache (:func:`fp8_ds_mla_kv_cache`: `[num_blocks, 64, 656]`
    uint8); its :meth:`~AttentionCase.reference` then attends the dequantized values."""
    return dataclasses.replace(case, kv_cache=fp8_ds_mla_kv_cache(case.kv_cache))


Result = TypeVar("Result")


def capture_cuda_graph(call: Callable[[], Result]) -> Tuple[torch.cuda.CUDAGraph, Result]:
    """Run ``call`` once on a side stream, then capture it into a CUDA graph on the current device.

    The first run compiles kernels and allocates what is allocated lazily (split workspaces), which
    must not happen during capture. Returns the graph and what the captured ``call`` returned (its
    tensors are the graph's outputs, rewritten by every replay).
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = call()
    return graph, result


def poisoned_outputs(num_tokens: int, num_heads: int, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(out [T, N, 512] bf16, lse [T, N] fp32)`` filled with NaN, so unwritten elements fail."""
    out = torch.full((num_tokens, num_heads, KV_LORA_RANK), float("nan"), dtype=torch.bfloat16, device=device)
    lse = torch.full((num_tokens, num_heads), float("nan"), dtype=torch.float32, device=device)
    return out, lse


def assert_attention_close(
    out: torch.Tensor, lse: torch.Tensor, ref_out: torch.Tensor, ref_lse: torch.Tensor, what: str = ""
) -> None:
    """Output within :data:`ATTENTION_REL_TOL`; LSE ``-inf`` exactly where the reference's is and within
    :data:`ATTENTION_LSE_TOL` elsewhere."""
    rel = relative_error(out, ref_out)
    assert rel < ATTENTION_REL_TOL, f"{what} out: rel err {rel:.3e} expected < {ATTENTION_REL_TOL:.0e}"
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty), f"{what} lse: -inf pattern differs from the reference"
    err = ((lse - ref_lse).abs() / ref_lse.abs().clamp(min=1.0))[~empty]
    assert err.numel() == 0 or err.max() < ATTENTION_LSE_TOL, f"{what} lse: err {err.max():.3e} expected < {ATTENTION_LSE_TOL:.0e}"
