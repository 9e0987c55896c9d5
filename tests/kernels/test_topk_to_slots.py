"""Top-k index conversion kernel against the PyTorch reference (Triton interpreter on CPU)."""

import re

import pytest
import torch

import sparse_mla_testing as testing
from sparse_mla.constants import INDEX_TOPK, KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE
from sparse_mla_testing.topk_to_slots import slot_rows_view, topk_to_slots
from sparse_mla.reference import topk_to_slots_reference
from sparse_mla.kernels.triton_support import kernel_device_type
from sparse_mla_testing.markers import requires_triton_device

pytestmark = requires_triton_device

DEVICE = torch.device(kernel_device_type())
POISON = 0x7F7F7F7F
"""Written into the outputs before each call, so entries the kernel leaves alone show up."""

NUM_BLOCKS = 96

# (seq_lens, query_lens): decode, prefill, mixed, speculative.
BATCHES = {
    "decode": ([70, 3000, 1, 129], [1, 1, 1, 1]),
    "prefill": ([40, 90], [40, 90]),
    "mixed": ([2500, 64, 300], [1, 64, 2]),
    "speculative": ([2100, 65], [3, 4]),
}


def _poisoned_outputs(num_tokens, topk):
    slot_ids = torch.full((num_tokens, topk), POISON, dtype=torch.int32, device=DEVICE)
    valid_count = torch.full((num_tokens,), POISON, dtype=torch.int32, device=DEVICE)
    return slot_ids, valid_count


@pytest.mark.parametrize("batch_kind", sorted(BATCHES))
@pytest.mark.parametrize("pattern", testing.INVALID_PATTERNS)
def test_matches_reference(batch_kind, pattern):
    seq_lens, query_lens = BATCHES[batch_kind]
    gen = testing.make_generator(DEVICE, seed=1)
    batch = testing.make_batch(seq_lens, query_lens, NUM_BLOCKS, gen, pattern=pattern, drop_fraction=0.1)
    slot_ids, valid_count = _poisoned_outputs(batch.num_tokens, INDEX_TOPK)
    got = topk_to_slots(
        batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table, NUM_BLOCKS,
        slot_ids=slot_ids, valid_count=valid_count,
    )
    assert got[0] is slot_ids and got[1] is valid_count, "expected the caller's output buffers back"
    testing.assert_slots_match_reference(
        batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table, NUM_BLOCKS, slot_ids, valid_count
    )


def _out_of_range_case():
    """Four tokens of two requests whose rows mix every kind of invalid entry with valid ones."""
    gen = testing.make_generator(DEVICE, seed=2)
    topk = 256
    block_table = torch.tensor([[5, -1, 95, 96, 7], [1, 2, 3, 4, 200]], dtype=torch.int32, device=DEVICE)
    req_id = torch.tensor([0, 1, 1, 0], dtype=torch.int32, device=DEVICE)
    # Token lengths reach past the 5-column block table (320 positions) on purpose.
    token_kv_len = torch.tensor([400, 300, 1000, 0], dtype=torch.int32, device=DEVICE)
    topk_indices = torch.randint(-3, 500, (4, topk), generator=gen, device=DEVICE, dtype=torch.int32)
    return topk_indices, req_id, token_kv_len, block_table, 96


def test_out_of_range_positions_and_blocks_are_dropped():
    topk_indices, req_id, token_kv_len, block_table, num_blocks = _out_of_range_case()
    slot_ids, valid_count = _poisoned_outputs(*topk_indices.shape)
    topk_to_slots(topk_indices, req_id, token_kv_len, block_table, num_blocks, slot_ids=slot_ids, valid_count=valid_count)
    testing.assert_slots_match_reference(topk_indices, req_id, token_kv_len, block_table, num_blocks, slot_ids, valid_count)
    assert valid_count[3] == 0, "a token of length 0 (padding) expected no valid entry"
    assert (slot_ids < num_blocks * KV_BLOCK_SIZE).all() and (slot_ids >= 0).all(), "a slot id outside the cache"


def test_request_outside_block_table_gives_no_slots():
    topk_indices = torch.arange(8, dtype=torch.int32, device=DEVICE).repeat(3, 1)
    req_id = torch.tensor([0, 2, -1], dtype=torch.int32, device=DEVICE)
    token_kv_len = torch.full((3,), 8, dtype=torch.int32, device=DEVICE)
    block_table = torch.tensor([[4], [6]], dtype=torch.int32, device=DEVICE)
    slot_ids, valid_count = _poisoned_outputs(3, 8)
    topk_to_slots(topk_indices, req_id, token_kv_len, block_table, 8, slot_ids=slot_ids, valid_count=valid_count)
    assert valid_count.tolist() == [8, 0, 0], f"valid_count expected [8, 0, 0], got {valid_count.tolist()}"
    assert slot_ids[0].tolist() == list(range(4 * KV_BLOCK_SIZE, 4 * KV_BLOCK_SIZE + 8))
    assert (slot_ids[1:] == 0).all(), "rows of an unknown request expected all 0"


def test_padded_cache_slot_ids_index_its_row_view():
    """A vLLM cache whose blocks lie 67 slots apart: the slot ids of ``block_stride_rows = 67`` address, in
    :func:`slot_rows_view` (no copy), exactly the slots the contiguous reference's ids address."""
    gen = testing.make_generator(DEVICE, seed=4)
    batch = testing.make_batch([300, 700], [2, 3], NUM_BLOCKS, gen, topk=128, pattern="scattered", drop_fraction=0.2)
    kv_cache = testing.make_kv_cache(NUM_BLOCKS, DEVICE, gen)
    padded = testing.padded_kv_cache(kv_cache, 3 * KV_CACHE_HEAD_SIZE)
    rows, block_stride_rows = slot_rows_view(padded)
    assert block_stride_rows == 67 and rows.data_ptr() == padded.data_ptr(), "expected a view, 67 slots per block"
    assert rows.shape == ((NUM_BLOCKS - 1) * 67 + KV_BLOCK_SIZE, KV_CACHE_HEAD_SIZE)
    slot_ids, valid_count = _poisoned_outputs(batch.num_tokens, 128)
    topk_to_slots(batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table, NUM_BLOCKS,
                  slot_ids=slot_ids, valid_count=valid_count, block_stride_rows=block_stride_rows)
    ref_slots, ref_count = topk_to_slots_reference(
        batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table, NUM_BLOCKS)
    assert torch.equal(valid_count, ref_count), f"valid_count expected {ref_count.tolist()}, got {valid_count.tolist()}"
    flat = kv_cache.view(-1, KV_CACHE_HEAD_SIZE)
    for t in range(batch.num_tokens):
        n = int(ref_count[t])
        expected = ref_slots[t, :n] // KV_BLOCK_SIZE * block_stride_rows + ref_slots[t, :n] % KV_BLOCK_SIZE
        assert torch.equal(slot_ids[t, :n], expected), f"token {t}: slot ids differ from the reference"
        assert torch.equal(rows[slot_ids[t, :n].long()], flat[ref_slots[t, :n].long()]), f"token {t}: other slots"
        assert (slot_ids[t, n:] == 0).all(), f"token {t}: fill after the valid ids expected 0"
    assert not rows[slot_ids.long()].isnan().any(), "a slot id points into a padding gap"


def test_slot_rows_view_needs_whole_slot_block_stride():
    kv_cache = testing.make_kv_cache(4, DEVICE, testing.make_generator(DEVICE, seed=5))
    rows, block_stride_rows = slot_rows_view(kv_cache)
    assert block_stride_rows == KV_BLOCK_SIZE and torch.equal(rows, kv_cache.view(-1, KV_CACHE_HEAD_SIZE))
    with pytest.raises(ValueError, match=r"argument 'kv_cache' expected a block stride that is a multiple of 576 "
                                         r"elements \(one slot, for page-size-1 views of the cache\) and >= "
                                         r"36864, got stride\(0\) = 36964 \(36964 % 576 = 100\)"):
        slot_rows_view(testing.padded_kv_cache(kv_cache, 100))
    with pytest.raises(ValueError, match=r"argument 'kv_cache' expected strides \(\*, 576, 1\) \(contiguous slots\), "
                                         r"got \(576, 2304, 1\)"):
        slot_rows_view(kv_cache.transpose(0, 1).contiguous().transpose(0, 1))


def test_strided_inputs_and_outputs():
    gen = testing.make_generator(DEVICE, seed=3)
    batch = testing.make_batch([300, 700], [2, 3], NUM_BLOCKS, gen, topk=128, pattern="scattered")
    num_tokens = batch.num_tokens
    # Column-major top-k rows, every other request id, and the first rows of a larger page table.
    topk_indices = batch.topk_indices.t().contiguous().t()
    req_id = torch.stack([batch.req_id, -batch.req_id], dim=1)[:, 0]
    page_table = torch.full((num_tokens + 4, 128), POISON, dtype=torch.int32, device=DEVICE)
    counts = torch.full((num_tokens, 2), POISON, dtype=torch.int32, device=DEVICE)
    topk_to_slots(
        topk_indices, req_id, batch.token_kv_len, batch.block_table, NUM_BLOCKS,
        slot_ids=page_table[:num_tokens], valid_count=counts[:, 1],
    )
    testing.assert_slots_match_reference(
        batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table, NUM_BLOCKS,
        page_table[:num_tokens], counts[:, 1],
    )
    assert (page_table[num_tokens:] == POISON).all(), "rows past T of the page table expected untouched"
    assert (counts[:, 0] == POISON).all(), "the other column of the count buffer expected untouched"


def test_allocates_outputs_and_handles_zero_tokens():
    gen = testing.make_generator(DEVICE, seed=4)
    batch = testing.make_batch([100], [2], NUM_BLOCKS, gen, topk=64)
    slot_ids, valid_count = topk_to_slots(batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table, NUM_BLOCKS)
    testing.assert_slots_match_reference(
        batch.topk_indices, batch.req_id, batch.token_kv_len, batch.block_table, NUM_BLOCKS, slot_ids, valid_count
    )
    empty = torch.empty(0, 64, dtype=torch.int32, device=DEVICE)
    none = torch.empty(0, dtype=torch.int32, device=DEVICE)
    slot_ids, valid_count = topk_to_slots(empty, none, none, batch.block_table, NUM_BLOCKS)
    assert slot_ids.shape == (0, 64) and valid_count.shape == (0,)


# ---------------------------------------------------------------------------------------------- check mode


def _check_case():
    block_table = torch.tensor([[3, 4], [5, 200]], dtype=torch.int32, device=DEVICE)
    req_id = torch.tensor([0, 1, 0], dtype=torch.int32, device=DEVICE)
    token_kv_len = torch.tensor([100, 128, 0], dtype=torch.int32, device=DEVICE)
    topk_indices = torch.full((3, 16), -1, dtype=torch.int32, device=DEVICE)
    topk_indices[0, :4] = torch.tensor([0, 99, 64, 5])
    topk_indices[1, :3] = torch.tensor([0, 63, 1])
    topk_indices[2, :] = 12345  # padding token: its row is not checked
    return topk_indices, req_id, token_kv_len, block_table


def test_check_mode_accepts_good_rows_and_ignores_padding_rows():
    topk_indices, req_id, token_kv_len, block_table = _check_case()
    slot_ids, valid_count = topk_to_slots(topk_indices, req_id, token_kv_len, block_table, 8, check=True)
    assert valid_count.tolist() == [4, 3, 0], f"valid_count expected [4, 3, 0], got {valid_count.tolist()}"


@pytest.mark.parametrize(
    "token, column, value, message",
    [
        (0, 7, 100, "token 0, column 7: top-k index 100 expected -1 or in [0, token_kv_len = 100), got 100"),
        (1, 5, -2, "token 1, column 5: top-k index -2 expected -1 or in [0, token_kv_len = 128), got -2"),
        (1, 3, 64, "block_table[1, 1] expected in [0, num_blocks = 8), got 200"),
    ],
)
def test_check_mode_names_first_bad_index(token, column, value, message):
    topk_indices, req_id, token_kv_len, block_table = _check_case()
    topk_indices[token, column] = value
    topk_indices[1, 15] = 127 + 64  # a later bad entry must not be the one reported
    with pytest.raises(ValueError, match=re.escape(message)):
        topk_to_slots(topk_indices, req_id, token_kv_len, block_table, 8, check=True)


def test_check_mode_past_block_table_and_bad_request():
    topk_indices, req_id, token_kv_len, block_table = _check_case()
    token_kv_len[0] = 1000
    topk_indices[0, 9] = 128
    with pytest.raises(ValueError, match=r"token 0, column 9: top-k index 128 lies in block-table column 2, expected < max_blocks = 2"):
        topk_to_slots(topk_indices, req_id, token_kv_len, block_table, 8, check=True)
    topk_indices, req_id, token_kv_len, block_table = _check_case()
    req_id[1] = 2
    with pytest.raises(ValueError, match=r"token 1: req_id expected in \[0, 2\), got 2"):
        topk_to_slots(topk_indices, req_id, token_kv_len, block_table, 8, check=True)


# ---------------------------------------------------------------------------------------------- bad input


def _good_args():
    topk_indices, req_id, token_kv_len, block_table = _check_case()
    return dict(topk_indices=topk_indices, req_id=req_id, token_kv_len=token_kv_len, block_table=block_table, num_blocks=8)


@pytest.mark.parametrize(
    "name, bad, error, message",
    [
        ("topk_indices", lambda a: a.long(), TypeError, "argument 'topk_indices' expected dtype torch.int32, got torch.int64"),
        ("topk_indices", lambda a: a[0], ValueError, r"argument 'topk_indices' expected shape \(\*, \*\), got \(16,\)"),
        ("req_id", lambda a: a[:2], ValueError, r"argument 'req_id' expected shape \(3,?\), got \(2,\)"),
        ("token_kv_len", lambda a: a.float(), TypeError, "argument 'token_kv_len' expected dtype torch.int32, got torch.float32"),
        ("block_table", lambda a: a[0], ValueError, r"argument 'block_table' expected shape \(\*, \*\), got \(2,\)"),
        ("num_blocks", lambda a: 8.0, TypeError, "argument 'num_blocks' expected an int, got float"),
        ("num_blocks", lambda a: 2**26, ValueError,
         r"argument 'num_blocks' expected 0 <= \(num_blocks - 1\) \* block_stride_rows \+ 64 <= 2147483647"),
        ("block_stride_rows", lambda a: 63, ValueError, "argument 'block_stride_rows' expected an int >= 64, got 63"),
        ("slot_ids", lambda a: torch.empty(3, 8, dtype=torch.int32, device=DEVICE), ValueError,
         r"argument 'slot_ids' expected shape \(3, 16\), got \(3, 8\)"),
        ("valid_count", lambda a: torch.empty(3, dtype=torch.int64, device=DEVICE), TypeError,
         "argument 'valid_count' expected dtype torch.int32, got torch.int64"),
    ],
)
def test_bad_input_names_argument(name, bad, error, message):
    args = _good_args()
    args[name] = bad(args.get(name))
    with pytest.raises(error, match=message):
        topk_to_slots(**args)
