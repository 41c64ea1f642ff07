#include "ops/mla_decode/split_heuristic.hpp"

namespace tileops::detail {

long long splits_filling_waves(long long ctas, long long slots, long long max_splits, double min_fill, bool every_slot) {
    long long splits = 1;
    double best = 0;
    for (long long candidate = 1; candidate <= max_splits; ++candidate) {
        const long long total = ctas * candidate;
        const double fill = static_cast<double>(total) / static_cast<double>((total + slots - 1) / slots * slots);
        if ((!every_slot || total >= slots) && fill >= min_fill) return candidate;
        if (fill > best + 1e-9) {
            best = fill;
            splits = candidate;
        }
    }
    return splits;
}

}  // namespace tileops::detail
