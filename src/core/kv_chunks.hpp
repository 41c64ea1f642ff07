// What the host must know of kernel_templates/common/kv_chunks.cuh (decode attention, MLA decode).
#pragma once

#include <cstddef>

namespace tileops {

// Static shared memory a CTA of a balanced batch holds for finding its chunk: KvChunkScratch (64
// words and the chunk found, 552 bytes), and the padding that can follow it before the kernels'
// 128-byte aligned shared arrays (ptxas, sm_90a: 640 more bytes in the tensor-core decode kernel
// and the MLA sm80 kernel).
inline constexpr size_t kKvChunkSharedBytes = 640;

}  // namespace tileops
