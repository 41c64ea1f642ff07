#include "core/kv_cache_checks.hpp"

#include <limits>

#include <fmt/format.h>

#include "tileops/error.hpp"

namespace tileops::detail {

void check_kv_pages(const char* op, int64_t page_size, int64_t num_pages, int64_t max_pages_per_seq,
                    int64_t max_kv_len) {
    constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
    if (page_size == 0) {
        if (num_pages != 0 || max_pages_per_seq != 0)
            throw InvalidArgument(fmt::format("tileops::{}: num_pages and max_pages_per_seq need page_size > 0", op));
        return;
    }
    if (page_size != 16 && page_size != 32 && page_size != 64 && page_size != 128 && page_size != 256)
        throw InvalidArgument(fmt::format(
            "tileops::{}: page_size must be 16, 32, 64, 128 or 256 (or 0: contiguous KV), got {}", op, page_size));
    check_in_range(op, "num_pages", num_pages, 1, kIntMax);
    check_in_range(op, "max_pages_per_seq", max_pages_per_seq, 1, kIntMax);
    if (max_kv_len > max_pages_per_seq * page_size)
        throw InvalidArgument(fmt::format("tileops::{}: max_kv_len ({}) exceeds max_pages_per_seq x page_size ({} x {})",
                                          op, max_kv_len, max_pages_per_seq, page_size));
}

DecodeIndexSpans check_decode_indices(const char* op, const TensorArg& lengths, const TensorArg* page_table,
                                      const OutputArg* lse, int64_t batch, int64_t q_len, int64_t num_heads,
                                      int64_t max_pages_per_seq) {
    DecodeIndexSpans spans{};
    spans.lengths = check_tensor(op, "lengths", lengths.data(), lengths.view(), DType::int32, {batch}, {1}, 4, "[batch]");
    if (page_table != nullptr)
        spans.page_table = check_tensor(op, "page_table", page_table->data(), page_table->view(), DType::int32,
                                        {batch, max_pages_per_seq}, {max_pages_per_seq, 1}, 4, "[batch, max_pages_per_seq]");
    if (lse != nullptr)
        spans.lse = check_tensor(op, "lse", lse->data(), lse->view(), DType::fp32, {batch, q_len, num_heads},
                                 {q_len * num_heads, num_heads, 1}, 4, "[batch, q_len, num_heads]");
    return spans;
}

}  // namespace tileops::detail
