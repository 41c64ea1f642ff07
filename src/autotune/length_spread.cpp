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

}  // namespace tileops::tuning
