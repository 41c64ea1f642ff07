// How the tuner fills a batch's sequence lengths (decode attention, MLA decode) and a grouped
// GEMM's rows a group. A tuning key names only the longest length (the total rows), and by
// default every sequence is timed at it (every group gets an even share); a serving batch rarely
// looks like that, and the chunks the kernels cut it into (common/kv_chunks.cuh) or the groups'
// partial tiles then differ, which can favour another config. `tileops-tune tune --lengths` times
// candidates on a seeded spread instead, the same four that bench/bench_decode_lengths.py draws.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tileops::tuning {

enum class LengthSpread {
    uniform,    // every sequence at the longest
    one_long,   // one at the longest, the others 1-256 tokens (chat turns beside a long document)
    long_tail,  // log-uniform between 16 and the longest, one at the longest
    ragged,     // uniform between 1 and the longest, one at the longest
};

// "uniform", "one_long", "long_tail" or "ragged"; throws InvalidArgument naming the choices.
LengthSpread parse_length_spread(std::string_view name);
std::string length_spread_name(LengthSpread spread);

// `batch` lengths in [1, longest] (0 where longest is 0), one of them `longest`, drawn from `seed`.
std::vector<int32_t> spread_lengths(LengthSpread spread, long long batch, long long longest, uint64_t seed);

// Where part `index` of `parts` (> 0) as even as integers allow begins, when they add up to
// `total`: index * total / parts rounded down.
long long even_offset(long long total, long long parts, long long index);

// The offsets (groups + 1, from 0 to rows) of `groups` groups that share `rows` in proportion to
// lengths the spread draws up to 4096 (uniform: as even as integers allow; one_long: one hot
// expert; long_tail and ragged: uneven loads), drawn from `seed`.
std::vector<int64_t> spread_group_offsets(LengthSpread spread, long long groups, long long rows, uint64_t seed);

}  // namespace tileops::tuning
