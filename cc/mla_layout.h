// The DeepSeek-V3.2 MLA cache layout every kernel and op of ours assumes (sparse_mla.constants in
// Python): slot = [c_kv (512) | k_rope (64)] bf16, 64 slots per cache block.
#pragma once

namespace sparse_mla {

constexpr int kKvLoraRank = 512;                     // c_kv width (kv_lora_rank)
constexpr int kRopeDim = 64;                         // k_rope width (qk_rope_head_dim)
constexpr int kSlotElems = kKvLoraRank + kRopeDim;  // 576 bf16 per cache slot
constexpr int kBlockSize = 64;                       // cache slots per block

}  // namespace sparse_mla
