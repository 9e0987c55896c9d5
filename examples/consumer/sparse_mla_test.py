"""A consumer's test of sparse_mla's CPU parts: the float32 reference and the metadata builder."""

import math
import unittest

import torch

from sparse_mla.backend import SparseMLAMetadataBuilder
from sparse_mla.common_metadata import CommonAttentionMetadata
from sparse_mla.reference import sparse_mla_reference

CPU = torch.device("cpu")


class SparseMLAFromConsumerTest(unittest.TestCase):
    def test_reference_attends_the_selected_slots(self):
        # Two cache blocks; token 0 selects slots 3 and 70, token 1 selects slot 5 (and -1 = none).
        generator = torch.Generator().manual_seed(0)
        kv_cache = torch.randn(2, 64, 576, generator=generator)
        q = torch.randn(2, 1, 576, generator=generator)
        slot_ids = torch.tensor([[3, 70], [5, -1]])
        scale = 192**-0.5
        out, lse = sparse_mla_reference(q[..., :512], q[..., 512:], kv_cache, slot_ids, scale)

        rows = kv_cache.reshape(-1, 576)
        scores = [float(q[0, 0] @ rows[s]) * scale for s in (3, 70)]
        weights = torch.softmax(torch.tensor(scores), dim=0)
        expected_out0 = weights[0] * rows[3, :512] + weights[1] * rows[70, :512]
        torch.testing.assert_close(out[0, 0], expected_out0, rtol=1e-5, atol=1e-5)
        self.assertAlmostEqual(float(lse[0, 0]), math.log(sum(math.exp(s) for s in scores)), places=4)
        torch.testing.assert_close(out[1, 0], rows[5, :512], rtol=1e-5, atol=1e-5)  # one slot: its value

    def test_builder_gives_each_token_its_request_and_causal_length(self):
        # Request 0 decodes one token of a 100-token sequence; request 1 prefills 3 tokens of 3.
        query_start_loc = torch.tensor([0, 1, 4], dtype=torch.int32)
        seq_lens = torch.tensor([100, 3], dtype=torch.int32)
        common = CommonAttentionMetadata(
            query_start_loc=query_start_loc,
            query_start_loc_cpu=query_start_loc,
            seq_lens=seq_lens,
            seq_lens_cpu=seq_lens,
            num_reqs=2,
            num_actual_tokens=4,
            max_query_len=3,
            max_seq_len=100,
            slot_mapping=torch.tensor([99, 64, 65, 66]),
            block_table_tensor=torch.tensor([[0, 2], [1, 0]], dtype=torch.int32),
        )
        metadata = SparseMLAMetadataBuilder(max_num_batched_tokens=8, device=CPU, num_heads=16).build(0, common)
        self.assertEqual(metadata.req_id.tolist(), [0, 1, 1, 1])
        self.assertEqual(metadata.token_kv_len.tolist(), [100, 1, 2, 3])


if __name__ == "__main__":
    unittest.main()
