"""GPU: the metadata builder's CUDA kernel (sparse_mla.ops.token_metadata) equals its PyTorch path.

The same sequence of steps goes through a builder on the GPU (which uses the kernel) and one on the
CPU (the PyTorch ops): decode, mixed prefill + decode, speculative, CUDA-graph padding of tokens and of
request slots, an all-padding step, and a large step followed by a smaller one (the stale tail must be
reset). Every entry of the persistent buffers is compared, poisoned before the GPU steps.
"""

import pytest
import torch

import sparse_mla_testing as testing
from sparse_mla.backend import SparseMLAMetadataBuilder
from sparse_mla.ops import token_metadata

pytestmark = pytest.mark.skipif(not token_metadata.is_available(), reason=f"op library: {token_metadata.is_available().reason}")

CUDA, CPU = torch.device("cuda"), torch.device("cpu")
MAX_TOKENS = 40

STEPS = [  # (seq_lens, query_lens, padded token count, padded request slots)
    ([100, 3000, 7], [1, 1, 1], 4, 1),  # decode, graph-padded
    ([500, 90, 2048, 33], [17, 1, 3, 2], 32, 0),  # mixed prefill, decode, speculative
    ([9000, 12], [4, 4], 8, 2),  # speculative, padded
    ([], [], 8, 0),  # every token padding
    ([64, 65, 6000], [1, 1, 1], 3, 0),  # smaller than the steps before: stale tail
]


def test_kernel_equals_the_pytorch_path_over_a_sequence_of_steps():
    gpu = SparseMLAMetadataBuilder(MAX_TOKENS, CUDA, 16, route="triton")
    cpu = SparseMLAMetadataBuilder(MAX_TOKENS, CPU, 16, route="triton")
    assert gpu._token_metadata_kernel and not cpu._token_metadata_kernel
    for buffer in (gpu._req_id, gpu._token_kv_len, gpu._kv_len_bound):
        buffer.fill_(-99)  # poisoned: the first step must write everything it owns
    gpu._written_end = MAX_TOKENS  # ... and reset the whole tail
    for seq_lens, query_lens, num_tokens, padded_reqs in STEPS:
        gpu.build(0, testing.make_common_metadata(seq_lens, query_lens, num_tokens, padded_reqs, device=CUDA))
        cpu.build(0, testing.make_common_metadata(seq_lens, query_lens, num_tokens, padded_reqs, device=CPU))
        for name in ("_req_id", "_token_kv_len", "_kv_len_bound"):
            got, want = getattr(gpu, name).cpu(), getattr(cpu, name)
            assert torch.equal(got, want), f"{name} after step {seq_lens}/{query_lens}: {got.tolist()} != {want.tolist()}"


def test_bad_arguments_raise_naming_the_argument():
    qsl = torch.tensor([0, 1, 2], dtype=torch.int32, device=CUDA)
    seq_lens = torch.tensor([5, 6], dtype=torch.int32, device=CUDA)
    out = [torch.zeros(8, dtype=torch.int32, device=CUDA) for _ in range(3)]
    with pytest.raises(ValueError, match="seq_lens"):  # stable-ABI ops raise no TypeError
        token_metadata.token_metadata(qsl, seq_lens.long(), 2, 2, 2048, *out)
    with pytest.raises(ValueError, match="query_start_loc"):
        token_metadata.token_metadata(qsl[:2], seq_lens, 2, 2, 2048, *out)
    with pytest.raises(ValueError, match="kv_len_bound"):
        token_metadata.token_metadata(qsl, seq_lens, 2, 9, 2048, out[0].new_zeros(9), out[1].new_zeros(9), out[2])
    with pytest.raises(ValueError, match="num_tokens"):
        token_metadata.token_metadata(qsl, seq_lens, 3, 2, 2048, *out)
