// The DeepSeek-V3.2 MLA cache layout every kernel and op of ours assumes (sparse_mla.constants in
// Python): slot = [c_kv (512) | k_rope (64)] bf16 (or the fp8_ds_mla slot below), 64 slots per cache block.
#pragma once

namespace sparse_mla {

constexpr int kKvLoraRank = 512;                     // c_kv width (kv_lora_rank)
constexpr int kRopeDim = 64;                         // k_rope width (qk_rope_head_dim)
constexpr int kSlotElems = kKvLoraRank + kRopeDim;  // 576 bf16 per cache slot
constexpr int kBlockSize = 64;                       // cache slots per block

// The fp8_ds_mla slot (vLLM's FlashMLA sparse cache, sparse_mla.fp8_ds_mla in Python): 512 fp8 e4m3
// c_kv values, 4 fp32 scales (scale g covers c_kv[128 g, 128 g + 128)), 64 bf16 k_rope values.
constexpr int kFp8ScaleGroup = 128;                  // c_kv values per fp32 scale
constexpr int kFp8ScalesOffset = kKvLoraRank;        // bytes [512, 528): the 4 scales
constexpr int kFp8RopeOffset = kFp8ScalesOffset + 4 * (kKvLoraRank / kFp8ScaleGroup);  // bytes [528, 656)
constexpr int kFp8SlotBytes = kFp8RopeOffset + 2 * kRopeDim;                          // 656

}  // namespace sparse_mla
