"""The benchmark's stand-in indexer (sparse_mla_testing.stand_in_indexer) against its PyTorch reference
(Triton interpreter on CPU, compiled on a GPU): every entry of every row, into a poisoned buffer."""

import pytest
import torch

import sparse_mla_testing as testing
from sparse_mla.constants import INDEX_TOPK
from sparse_mla.kernels.triton_support import kernel_device_type
from sparse_mla_testing.markers import requires_triton_device
from sparse_mla_testing.stand_in_indexer import shifted_rows_reference, write_shifted_rows

pytestmark = requires_triton_device

DEVICE = torch.device(kernel_device_type())
POISON = 0x7F7F7F7F


@pytest.mark.parametrize("topk", [INDEX_TOPK, 100])
def test_writes_each_rows_shifted_positions(topk):
    """Decode, speculative and padding tokens, -1 scattered in the rows; a row narrower than a power of two
    leaves the columns past it alone; the rows are a strided view and the output a view of a wider buffer."""
    gen = testing.make_generator(DEVICE, seed=3)
    batch = testing.make_batch([5000, 90, 3000], [1, 3, 1], 200, gen, topk=topk, pattern="scattered",
                               drop_fraction=0.1)
    token_kv_len = torch.cat([batch.token_kv_len, torch.zeros(1, dtype=torch.int32, device=DEVICE)])
    rows = torch.cat([batch.topk_indices, torch.full((1, topk), -1, dtype=torch.int32, device=DEVICE)])
    rows = rows.t().contiguous().t()  # column-major: the kernel reads through both strides
    shift = torch.randint(0, 1 << 30, (rows.shape[0],), generator=gen, device=DEVICE, dtype=torch.int32)
    buffer = torch.full((rows.shape[0], topk + 8), POISON, dtype=torch.int32, device=DEVICE)
    write_shifted_rows(rows, shift, token_kv_len, buffer[:, :topk])

    expected = shifted_rows_reference(rows, shift, token_kv_len)
    assert torch.equal(buffer[:, :topk], expected)
    assert (buffer[:, topk:] == POISON).all(), "columns past the row were written"
    # What the reference promises the forward: valid entries stay distinct and below the causal length, -1 stays.
    assert torch.equal(expected < 0, rows < 0)
    for t in range(batch.num_tokens):
        valid = expected[t][expected[t] >= 0]
        assert int(valid.max()) < int(token_kv_len[t]) and len(valid.unique()) == len(valid)
    moved = (expected != rows) & (rows >= 0)
    assert moved.any(dim=1)[: batch.num_tokens].all(), "a shift left a row as it was: the layers would share rows"


def test_rejects_bad_arguments():
    rows = torch.zeros(2, 8, dtype=torch.int32, device=DEVICE)
    kv_len = torch.ones(2, dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="shift"):
        write_shifted_rows(rows, torch.zeros(3, dtype=torch.int32, device=DEVICE), kv_len, rows.clone())
    with pytest.raises(TypeError, match="out"):
        write_shifted_rows(rows, kv_len.clone(), kv_len, rows.long())
