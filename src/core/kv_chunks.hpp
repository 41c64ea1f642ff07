// What the host must know of kernel_templates/common/kv_chunks.cuh (decode attention, MLA decode).
#pragma once

#include <cstddef>

namespace tileops {

// Static shared memory a CTA of a balanced batch holds for finding its chunk (KvChunkScratch:
// 64 words and the chunk found), rounded up.
inline constexpr size_t kKvChunkSharedBytes = 576;

}  // namespace tileops
