"""tools/bench.py's inputs on the CPU: ``--tokens_per_request`` groups a copy's query tokens into requests (the last
takes the rest), each token of a request at its own position of the request's context, every top-k row full;
``--planner_constant`` sets a decode planner constant for the run."""

import pathlib
import sys

import pytest
import torch

import sparse_mla_testing as testing

ROOT = pathlib.Path(__file__).parents[2]  # the checkout, or its runfiles tree under Bazel
sys.path.insert(0, str(ROOT / "tools"))

import bench  # noqa: E402

CONTEXT, TOPK = 2060, 2048


@pytest.fixture(autouse=True)
def default_flags():
    """Each test parses its own command line; the flags return to their defaults after it."""
    yield
    bench.FLAGS.unparse_flags()


@pytest.mark.parametrize("per_request, query_lens", [(1, [1] * 7), (3, [3, 3, 1]), (8, [7])])
def test_tokens_are_grouped_into_requests(per_request, query_lens):
    bench.FLAGS(["bench", f"--tokens_per_request={per_request}", f"--context={CONTEXT}", f"--topk={TOPK}"])
    gen = testing.make_generator(torch.device("cpu"), 0)
    (copy,) = bench.make_copies(7, 16, 1, 7 * bench.blocks_per_context(CONTEXT), gen)
    batch = copy.batch
    assert batch.query_lens == query_lens and batch.seq_lens == [CONTEXT] * len(query_lens)
    want_req = torch.repeat_interleave(torch.arange(len(query_lens)), torch.tensor(query_lens))
    assert torch.equal(batch.req_id.long(), want_req)
    want_len = torch.cat([torch.arange(CONTEXT - q + 1, CONTEXT + 1) for q in query_lens])
    assert torch.equal(batch.token_kv_len.long(), want_len)
    valid = batch.topk_indices >= 0
    assert valid.all() and (batch.topk_indices < batch.token_kv_len[:, None]).all()
    assert copy.q_nope.shape == (7, 16, 512) and copy.out.shape == (7, 16, 512)


def test_no_request_without_tokens():
    with pytest.raises(Exception, match="tokens_per_request=0: 0 is not a positive integer"):
        bench.FLAGS(["bench", "--tokens_per_request=0"])


@pytest.mark.parametrize("per_request, num_blocks", [(1, 16 * 33), (8, 2 * 33), (64, 33)])
def test_the_cache_holds_one_context_a_request(per_request, num_blocks):
    """The grid's cache is sized by requests, not tokens (T = 8192 at 64 tokens a request: 128 contexts), and every
    request of a copy gets its own blocks of it."""
    bench.FLAGS(["bench", f"--tokens_per_request={per_request}", f"--context={CONTEXT}", f"--topk={TOPK}"])
    gen = testing.make_generator(torch.device("cpu"), 0)
    copies_of, caches = bench.grid_caches([16], [bench.kv_cache_format.BF16], 1, gen, {})  # 1-byte L2: one copy
    assert copies_of == {16: 1} and caches["bfloat16"].shape[0] == num_blocks
    (copy,) = bench.make_copies(16, 1, 1, num_blocks, gen)
    assert copy.batch.block_table.unique().numel() == num_blocks


def test_planner_constants_are_set_for_the_run(monkeypatch):
    for name in ("WIDE_PARTIAL_COST_IN_POSITIONS", "UNCAPPED_MAX_SPLITS"):
        monkeypatch.setattr(bench.decode, name, getattr(bench.decode, name))  # restored after the test
    bench.FLAGS(["bench", "--out_dir=unused", "--planner_constant=WIDE_PARTIAL_COST_IN_POSITIONS=0",
                 "--planner_constant=UNCAPPED_MAX_SPLITS=4"])
    bench.check_flags()
    assert (bench.decode.WIDE_PARTIAL_COST_IN_POSITIONS, bench.decode.UNCAPPED_MAX_SPLITS) == (0, 4)
    assert bench.provenance()["planner"] == "WIDE_PARTIAL_COST_IN_POSITIONS=0, UNCAPPED_MAX_SPLITS=4"


@pytest.mark.parametrize("item, message", [
    ("NO_SUCH_CONSTANT=1", "NAME an int or float constant"),
    ("PLAN_FIELDS=1", "NAME an int or float constant"),  # a tuple
    ("plan=1", "NAME an int or float constant"),  # a function
    ("WIDE_PARTIAL_COST_IN_POSITIONS", "expected an int, got ''"),
    ("UNCAPPED_MAX_SPLITS=1.5", "expected an int, got '1.5'"),
])
def test_bad_planner_constants_name_the_flag(item, message):
    bench.FLAGS(["bench", "--out_dir=unused", f"--planner_constant={item}"])
    with pytest.raises(bench.app.UsageError, match=f"--planner_constant.*{message}"):
        bench.check_flags()
