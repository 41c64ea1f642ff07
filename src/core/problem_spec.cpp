#include "core/problem_spec.hpp"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "tileops/error.hpp"

namespace tileops::detail {

std::optional<long long> decimal_number(const std::string& digits) {
    // Digits only: std::stoll alone would take "+16", " 16" and "16abc".
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    try {
        return std::stoll(digits);
    } catch (...) {  // out of range
        return std::nullopt;
    }
}

std::vector<long long> parse_shape(const std::string& text) {
    std::vector<long long> shape;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t end = std::min(text.find('x', start), text.size());
        // Digits only: "8xx4096", "8x+4096" and "8x 4096" are typos, not 8x4096.
        const std::optional<long long> value = decimal_number(text.substr(start, end - start));
        if (!value || *value < 1)
            throw InvalidArgument(fmt::format("tileops: shape '{}' is not like 8192x4096 (positive integers)", text));
        shape.push_back(*value);
        start = end + 1;
    }
    return shape;
}

std::vector<std::string> split_flags(const std::string& flags) {
    std::vector<std::string> parts;
    std::stringstream stream(flags);
    std::string part;
    while (std::getline(stream, part, ','))
        if (!part.empty()) parts.push_back(part);
    return parts;
}

std::optional<long long> flag_number(const std::string& flag, const std::string& prefix) {
    if (flag.size() <= prefix.size() || flag.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
    return decimal_number(flag.substr(prefix.size()));
}

void check_flags_distinct(const std::string& op, const std::vector<std::string>& flags,
                          const std::vector<std::string>& numbered) {
    std::vector<std::string> seen;
    for (const std::string& flag : flags) {
        std::string kind = flag;
        for (const std::string& prefix : numbered)
            if (flag_number(flag, prefix)) kind = prefix + "N";
        if (std::find(seen.begin(), seen.end(), kind) != seen.end())
            throw InvalidArgument(fmt::format("tileops: {}: flag {} given twice ('{}')", op, kind, flag));
        seen.push_back(kind);
    }
}

DTypePair parse_dtype_pair(const std::string& text) {
    auto arrow = text.find("->");
    if (arrow == std::string::npos) {
        DType d = parse_dtype(text);
        return {d, d};
    }
    return {parse_dtype(text.substr(0, arrow)), parse_dtype(text.substr(arrow + 2))};
}

void require_rank(const ProblemSpec& spec, size_t rank, const char* layout) {
    if (spec.shape.size() != rank)
        throw InvalidArgument(fmt::format("tileops: {} needs a shape {}, got {} dimension(s)", spec.op, layout,
                                          spec.shape.size()));
}

PagedCache paged_cache(const std::string& op, const std::vector<std::string>& flags, long long batch,
                       long long max_kv_len) {
    PagedCache cache;
    for (const std::string& flag : flags) {
        const long long page = flag_number(flag, "page").value_or(0);
        if (page <= 0) throw InvalidArgument(fmt::format("tileops: flag '{}' does not apply to {} (pageN)", flag, op));
        cache.page_size = page;
        // Checked: the sizes are validated by the op's constructor, after this arithmetic.
        cache.max_pages_per_seq = max_kv_len / page + (max_kv_len % page != 0 ? 1 : 0);
        if (__builtin_mul_overflow(batch, cache.max_pages_per_seq, &cache.num_pages))
            throw InvalidArgument(fmt::format("tileops: {}: a page pool of {} x {} pages does not fit 64 bits", op,
                                              batch, cache.max_pages_per_seq));
    }
    return cache;
}

}  // namespace tileops::detail
