// A problem as text: what tileops-tune reads from its command line and workload files, and what a
// tuning database key holds ("rmsnorm", {8192, 4096}, "bf16", "residual"). Each op family turns
// it into an op (ops/<family>/*_family.cpp); these are the parsing pieces they share.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tileops/tensor.hpp"

namespace tileops::detail {

struct ProblemSpec {
    std::string op;                // "rmsnorm": an op name of the registry (ops/registry.hpp)
    std::vector<long long> shape;  // the op's dimensions, as its family documents them
    std::string dtype;             // "bf16" or "bf16->fp32"
    std::string flags;             // "" or a comma-separated list of the op's options
};

// "16" -> 16: decimal digits only (no sign, no spaces), nullopt otherwise or when out of range.
std::optional<long long> decimal_number(const std::string& digits);

// "8192x4096" -> {8192, 4096}; throws InvalidArgument on anything else (an empty part, a sign).
std::vector<long long> parse_shape(const std::string& text);

// The comma-separated parts of `flags`, empty parts dropped.
std::vector<std::string> split_flags(const std::string& flags);

// The number after `prefix` in a flag like "page16" or "window128"; nullopt when the flag is not
// the prefix followed by a number.
std::optional<long long> flag_number(const std::string& flag, const std::string& prefix);

// Refuses a flag given twice, counting every "<prefix>N" of `numbered` as one flag: page16 and
// page32 contradict each other. Throws InvalidArgument naming the op and the flag.
void check_flags_distinct(const std::string& op, const std::vector<std::string>& flags,
                          const std::vector<std::string>& numbered);

struct DTypePair {
    DType in, out;
};
// "bf16" -> {bf16, bf16}; "bf16->fp32" -> {bf16, fp32}.
DTypePair parse_dtype_pair(const std::string& text);

// Throws InvalidArgument unless the spec has `rank` dimensions; `layout` names them for the
// message ("rows x cols").
void require_rank(const ProblemSpec& spec, size_t rank, const char* layout);

// A paged KV cache from a decode problem's flags: pageN (N-token pages, a page pool of exactly
// batch x pages per sequence); zeros when no such flag is given. Throws InvalidArgument naming
// any other flag.
struct PagedCache {
    long long page_size = 0, max_pages_per_seq = 0, num_pages = 0;
};
PagedCache paged_cache(const std::string& op, const std::vector<std::string>& flags, long long batch,
                       long long max_kv_len);

}  // namespace tileops::detail
