// The split count of split-K / split-KV heuristics: how many pieces to cut each CTA's work into so
// that the grid fills the GPU's CTA slots in waves without a nearly empty last one.
#pragma once

namespace tileops::detail {

// The fewest splits in [1, max_splits] whose last wave of `ctas` x splits CTAs over `slots` slots is
// at least `min_fill` full (with `every_slot`, the grid must also reach every slot), else the
// count with the fullest last wave.
long long splits_filling_waves(long long ctas, long long slots, long long max_splits, double min_fill, bool every_slot);

}  // namespace tileops::detail
