// Argument checks that the decode ops (DecodeAttention, MlaDecode) share: a paged or contiguous
// KV cache's layout, and the per-sequence operands that index it. Failures are InvalidArgument
// naming the op and the argument.
#pragma once

#include <cstdint>

#include "core/validation.hpp"
#include "tileops/tensor.hpp"

namespace tileops::detail {

// A cache of `page_size`-token pages (16, 32, 64, 128 or 256: the kernels' tiles divide them),
// whose page table rows of `max_pages_per_seq` entries hold `max_kv_len` tokens; or, with
// page_size 0, one contiguous row of max_kv_len tokens a sequence and no pages at all.
void check_kv_pages(const char* op, int64_t page_size, int64_t num_pages, int64_t max_pages_per_seq,
                    int64_t max_kv_len);

// What run()'s per-sequence operands span, for check_outputs_apart (empty where not given).
struct DecodeIndexSpans {
    RowsSpan lengths{}, page_table{}, lse{};
};
// lengths: int32 [batch]; page_table (paged caches only, else null): int32 [batch,
// max_pages_per_seq]; lse (when asked for, else null): fp32 [batch, q_len, num_heads].
DecodeIndexSpans check_decode_indices(const char* op, const TensorArg& lengths, const TensorArg* page_table,
                                      const OutputArg* lse, int64_t batch, int64_t q_len, int64_t num_heads,
                                      int64_t max_pages_per_seq);

}  // namespace tileops::detail
