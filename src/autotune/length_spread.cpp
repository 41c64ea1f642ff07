#include "autotune/length_spread.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "tileops/error.hpp"

namespace tileops::tuning {
namespace {

constexpr std::pair<LengthSpread, std::string_view> kNames[] = {{LengthSpread::uniform, "uniform"},
                                                                {LengthSpread::one_long, "one_long"},
                                                                {LengthSpread::long_tail, "long_tail"},
                                                                {LengthSpread::ragged, "ragged"}};

}  // namespace

LengthSpread parse_length_spread(std::string_view name) {
    for (const auto& [spread, text] : kNames)
        if (name == text) return spread;
    throw InvalidArgument(fmt::format("unknown length spread '{}': give uniform, one_long, long_tail or ragged",
                                      std::string(name.substr(0, 64))));
}

std::string length_spread_name(LengthSpread spread) {
    for (const auto& [s, text] : kNames)
        if (s == spread) return std::string(text);
    return "uniform";
}

std::vector<int32_t> spread_lengths(LengthSpread spread, long long batch, long long longest, uint64_t seed) {
    const auto top = static_cast<int32_t>(std::clamp<long long>(longest, 0, INT32_MAX));
    std::vector<int32_t> lengths(static_cast<size_t>(std::max(batch, 0LL)), top);
    if (spread == LengthSpread::uniform || lengths.empty() || top <= 1) return lengths;
    std::mt19937_64 rng(seed);
    auto uniform_in = [&](int32_t low, int32_t high) { return std::uniform_int_distribution<int32_t>(low, high)(rng); };
    for (int32_t& len : lengths) {
        switch (spread) {
        case LengthSpread::one_long: len = uniform_in(1, std::min<int32_t>(256, top)); break;
        case LengthSpread::long_tail: {
            const double low = std::log(std::min<double>(16, top)), high = std::log(static_cast<double>(top));
            const double drawn = std::exp(std::uniform_real_distribution<double>(low, high)(rng));
            len = std::clamp(static_cast<int32_t>(drawn), 1, top);
            break;
        }
        case LengthSpread::ragged: len = uniform_in(1, top); break;
        case LengthSpread::uniform: break;
        }
    }
    lengths[static_cast<size_t>(uniform_in(0, static_cast<int32_t>(std::min<long long>(batch - 1, INT32_MAX))))] = top;
    return lengths;
}

long long even_offset(long long total, long long parts, long long index) {
    // Whole quotient and remainder apart, so that index times the total never overflows.
    return total / parts * index + total % parts * index / parts;
}

std::vector<int64_t> spread_group_offsets(LengthSpread spread, long long groups, long long rows, uint64_t seed) {
    const auto count = static_cast<size_t>(std::max(groups, 0LL));
    rows = std::max(rows, 0LL);
    std::vector<int64_t> offsets(count + 1, 0);
    if (count == 0) return offsets;
    if (spread == LengthSpread::uniform) {
        for (size_t g = 1; g <= count; ++g) offsets[g] = even_offset(rows, groups, static_cast<long long>(g));
        return offsets;
    }
    const std::vector<int32_t> weights = spread_lengths(spread, groups, 4096, seed);
    double total = 0;
    for (int32_t w : weights) total += w;
    // Each group's share rounded down, then the rows left over one each to the groups that lost
    // the most to rounding (the largest remainders), so the shares add up to rows exactly.
    std::vector<int64_t> share(count);
    std::vector<std::pair<double, size_t>> remainders(count);
    int64_t given = 0;
    for (size_t g = 0; g < count; ++g) {
        const double exact = static_cast<double>(rows) * weights[g] / total;
        share[g] = std::min<int64_t>(static_cast<int64_t>(exact), rows - given);
        given += share[g];
        remainders[g] = {exact - static_cast<double>(share[g]), g};
    }
    std::sort(remainders.begin(), remainders.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    for (size_t i = 0; given < rows; i = (i + 1) % count, ++given) ++share[remainders[i].second];
    for (size_t g = 0; g < count; ++g) offsets[g + 1] = offsets[g] + share[g];
    return offsets;
}

}  // namespace tileops::tuning
