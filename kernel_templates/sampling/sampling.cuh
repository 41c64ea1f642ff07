// Sampling a token from each row of logits: greedy (argmax), or temperature with top-k, top-p and
// min-p, without sorting the vocabulary. One block per row (the grid walks the rows):
//
//   1. max and argmax; a histogram of the top 11 bits of each logit's order key (for top-k).
//   2. top-k: a radix select (11, 11, 10 bits) finds the k-th largest key.
//   3. weights w = exp((logit - max) / temperature) as integers (x 2^40, so that sums do not
//      depend on the order of the atomics: the result is the same run after run); the set A =
//      top-k and w >= min_p, its mass, and a histogram of mass by key (for top-p).
//   4. top-p: a radix select by mass finds the smallest key whose tokens of A, from the largest
//      down, hold top_p of A's mass.
//   5. u uniform in [0, mass of the kept set) from Philox-4x32-10 (key: the seed; counter: the
//      row's offset and index), then a scan in index order finds the token where the running
//      mass passes u.
// Rows whose parameters ask for nothing skip the passes they do not need. Every pass reads the row
// again: from L2 when the batch's logits fit in it.
#pragma once

#include "common/infinity.cuh"
#include "common/types.cuh"
#include "sampling/sampling_args.cuh"

namespace tileops {

namespace sampling_detail {

constexpr float kWeightScale = 1099511627776.0f;  // 2^40: the weight of the largest logit
constexpr int kBins = 2048;                      // the widest radix digit (11 bits)
// Tokens top-k may leave for the later steps to work on in shared memory instead of the row.
constexpr int kCandidates = 2048;
// The radix digits of a 32-bit key, most significant first: 11, 11 and 10 bits.
__device__ __forceinline__ int digit_shift(int level) { return level == 0 ? 21 : level == 1 ? 10 : 0; }
__device__ __forceinline__ unsigned digit_bins(int level) { return level == 2 ? 1024u : 2048u; }

// A key whose unsigned order is the float order (NaN below everything).
__device__ __forceinline__ unsigned order_key(float x) {
    if (x != x) return 0u;
    const unsigned bits = __float_as_uint(x);
    return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

__device__ __forceinline__ unsigned long long weight_of(float logit, float max_logit, float inv_temperature) {
    const float w = __expf((logit - max_logit) * inv_temperature);
    return w > 0.0f ? __float2ull_rn(w * kWeightScale) : 0ull;  // NaN and underflow: 0
}

// Philox-4x32-10: 128 random bits from a 64-bit key and a 128-bit counter.
__device__ __forceinline__ uint4 philox(unsigned long long seed, uint4 counter) {
    unsigned k0 = static_cast<unsigned>(seed), k1 = static_cast<unsigned>(seed >> 32);
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        const unsigned hi0 = __umulhi(0xD2511F53u, counter.x), lo0 = 0xD2511F53u * counter.x;
        const unsigned hi1 = __umulhi(0xCD9E8D57u, counter.z), lo1 = 0xCD9E8D57u * counter.z;
        counter = make_uint4(hi1 ^ counter.y ^ k0, lo1, hi0 ^ counter.w ^ k1, lo0);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return counter;
}

// The VEC elements of a row from `i` on as floats; elements past n are -inf (key 1, weight 0).
template <typename T, int VEC>
__device__ __forceinline__ void load_elements(const T* row, long long i, long long n, bool aligned, float (&x)[VEC]) {
    if (aligned && i + VEC <= n) {
        load_vec<T, VEC>(row + i, x);
        return;
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) x[j] = i + j < n ? to_float(row[i + j]) : kNegativeInfinity;
}

// Vectors a thread loads before it uses any: a single block streams a row, so it needs many
// loads in flight (one vector at a time read 24 GB/s).
constexpr int kUnroll = 4;

// Calls f(index, value, valid) for the row's elements, kUnroll vectors of VEC a thread at a time
// (lane l of a warp takes vectors l, l + 32, ... of the warp's span). A warp stays whole to the
// end (past the row, `valid` is false).
template <typename T, int VEC, int THREADS, typename F>
__device__ __forceinline__ void for_each_element(const T* row, long long n, bool aligned, F&& f) {
    constexpr long long kWarpSpan = 32LL * VEC * kUnroll;
    const long long lane_offset = static_cast<long long>(threadIdx.x % 32) * VEC;
    for (long long base = static_cast<long long>(threadIdx.x / 32) * kWarpSpan; base < n;
         base += static_cast<long long>(THREADS / 32) * kWarpSpan) {
        float x[kUnroll][VEC];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) load_elements<T, VEC>(row, base + u * 32 * VEC + lane_offset, n, aligned, x[u]);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const long long i = base + u * 32 * VEC + lane_offset + j;
                f(i, x[u][j], i < n);
            }
    }
}

// hist[bin] += 1 where `active`. (Aggregating a warp's lanes by bin with __match_any_sync first
// was slower: 272 against 187 us for one row of 128256.)
__device__ __forceinline__ void add_count(unsigned* hist, unsigned bin, bool active) {
    if (active) atomicAdd(&hist[bin], 1u);
}

__device__ __forceinline__ void add_mass(unsigned long long* hist, unsigned bin, unsigned long long w, bool active) {
    if (active) atomicAdd(&hist[bin], w);
}

// Block-wide sum of one value a thread; every thread gets it. `scratch` holds a value a warp.
template <int THREADS>
__device__ __forceinline__ unsigned long long block_sum(unsigned long long v, unsigned long long* scratch) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    __syncthreads();
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    unsigned long long total = 0;
#pragma unroll
    for (int w = 0; w < THREADS / 32; ++w) total += scratch[w];
    return total;
}

// Block-wide exclusive prefix of one value a thread, in thread order; `total` gets the sum.
template <int THREADS>
__device__ __forceinline__ unsigned long long block_exclusive_scan(unsigned long long v, unsigned long long* scratch,
                                                                   unsigned long long& total) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    unsigned long long inclusive = v;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
        const unsigned long long other = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += other;
    }
    __syncthreads();
    if (lane == 31) scratch[warp] = inclusive;
    __syncthreads();
    unsigned long long before = 0;
    total = 0;
#pragma unroll
    for (int w = 0; w < THREADS / 32; ++w) {
        if (w < warp) before += scratch[w];
        total += scratch[w];
    }
    return before + inclusive - v;
}

// The bin where the running sum of `hist`, from the top bin down, reaches `need` (>= 1), and the
// sum of the bins above it. Run by warp 0; the result lands in *bin and *above.
template <typename H>
__device__ __forceinline__ void select_from_top(const H* hist, int bins, unsigned long long need, int* bin,
                                                unsigned long long* above) {
    const int lane = threadIdx.x;
    const int per_lane = bins / 32;
    const int top = bins - lane * per_lane;  // lane 0 holds the highest bins
    unsigned long long sum = 0;
    for (int b = top - 1; b >= top - per_lane; --b) sum += hist[b];
    unsigned long long inclusive = sum;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
        const unsigned long long other = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += other;
    }
    const unsigned reached = __ballot_sync(0xffffffffu, inclusive >= need);
    // Rounding can leave the total a hair below need: then the lowest bin with anything in it.
    const int owner = reached != 0 ? __ffs(reached) - 1 : 31;
    if (lane == owner) {
        unsigned long long running = inclusive - sum;
        int found = top - per_lane;
        for (int b = top - 1; b >= top - per_lane; --b) {
            if (running + hist[b] >= need) {
                found = b;
                break;
            }
            running += hist[b];
        }
        *bin = found;
        *above = running;
    }
}

}  // namespace sampling_detail

template <typename T, int VEC, int THREADS, bool GREEDY>
__global__ void __launch_bounds__(THREADS, 1) sampling_kernel(const SamplingArgs args) {
    using namespace sampling_detail;
    static_assert(THREADS % 32 == 0 && THREADS >= 64, "whole warps");
    __shared__ unsigned count_hist[kBins];
    __shared__ unsigned long long mass_hist[kBins];
    __shared__ unsigned long long scratch[THREADS / 32];
    __shared__ float best_value[THREADS / 32];
    __shared__ long long best_index[THREADS / 32];
    __shared__ int selected_bin;
    __shared__ unsigned long long selected_above;
    __shared__ long long sampled;
    __shared__ float candidate_logit[kCandidates];  // top-k's tokens, in index order
    __shared__ int candidate_index[kCandidates];

    const long long n = args.vocab;
    for (long long r = blockIdx.x; r < args.batch; r += gridDim.x) {
        const T* row = static_cast<const T*>(args.logits) + r * args.stride;
        const bool aligned = reinterpret_cast<unsigned long long>(row) % (sizeof(T) * VEC) == 0;

        // The row's parameters; values that ask for nothing (NaN included) turn the step off.
        float inv_temperature = 0.0f, min_p = 0.0f, top_p = 1.0f;
        long long top_k = 0;
        bool greedy = GREEDY;
        if constexpr (!GREEDY) {
            const float temperature = args.temperature[r];
            inv_temperature = 1.0f / temperature;
            top_k = args.top_k[r];
            greedy = !(temperature > 0.0f) || !isfinite(inv_temperature) || top_k == 1;
            const float mp = args.min_p[r], tp = args.top_p[r];
            min_p = mp > 0.0f ? fminf(mp, 1.0f) : 0.0f;
            top_p = tp < 1.0f ? fmaxf(tp, 0.0f) : 1.0f;  // NaN: 1 (off)
        }
        const bool use_top_k = !greedy && top_k > 1 && top_k < n;

        // 1. max and argmax (the lowest index among equals); the first digit's histogram.
        if (use_top_k)
            for (int b = threadIdx.x; b < kBins; b += THREADS) count_hist[b] = 0;
        __syncthreads();
        float best = kNegativeInfinity;
        long long best_at = -1;
        for_each_element<T, VEC, THREADS>(row, n, aligned, [&](long long i, float x, bool valid) {
            const float v = x != x ? kNegativeInfinity : x;  // NaN never wins
            if (valid && (best_at < 0 || v > best)) best = v, best_at = i;
            if (use_top_k) add_count(count_hist, order_key(x) >> digit_shift(0), valid);
        });
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) {
            const float other = __shfl_xor_sync(0xffffffffu, best, offset);
            const long long other_at = __shfl_xor_sync(0xffffffffu, best_at, offset);
            if (other_at >= 0 && (best_at < 0 || other > best || (other == best && other_at < best_at)))
                best = other, best_at = other_at;
        }
        if (threadIdx.x % 32 == 0) best_value[threadIdx.x / 32] = best, best_index[threadIdx.x / 32] = best_at;
        __syncthreads();
        for (int w = 0; w < THREADS / 32; ++w) {
            const float other = best_value[w];
            const long long other_at = best_index[w];
            if (other_at >= 0 && (best_at < 0 || other > best || (other == best && other_at < best_at)))
                best = other, best_at = other_at;
        }
        const float max_logit = best;
        if (greedy || !(max_logit > kNegativeInfinity)) {  // greedy, or nothing but -inf and NaN
            if (threadIdx.x == 0) args.tokens[r] = static_cast<int>(best_at < 0 ? 0 : best_at);
            __syncthreads();
            continue;
        }

        // 2. top-k: the k-th largest key, one radix digit a level.
        unsigned key_k = 0;
        if (use_top_k) {
            unsigned long long need = static_cast<unsigned long long>(top_k);
            unsigned prefix = 0;
            for (int level = 0; level < 3; ++level) {
                if (level > 0) {
                    for (int b = threadIdx.x; b < kBins; b += THREADS) count_hist[b] = 0;
                    __syncthreads();
                    const int shift_above = digit_shift(level - 1);
                    for_each_element<T, VEC, THREADS>(row, n, aligned, [&](long long, float x, bool valid) {
                        const unsigned key = order_key(x);
                        add_count(count_hist, (key >> digit_shift(level)) & (digit_bins(level) - 1),
                                  valid && (key >> shift_above) == prefix);
                    });
                }
                __syncthreads();
                if (threadIdx.x < 32)
                    select_from_top(count_hist, static_cast<int>(digit_bins(level)), need, &selected_bin, &selected_above);
                __syncthreads();
                need -= selected_above;
                prefix = (prefix << (level == 2 ? 10 : 11)) | static_cast<unsigned>(selected_bin);
            }
            key_k = prefix;  // ties with the k-th largest are all kept
        }

        // 2b. When top-k leaves at most kCandidates tokens (ties included), they are copied to
        // shared memory in index order, and the steps below read them instead of the row.
        constexpr int kSpan = VEC * kUnroll;  // elements a thread takes per step of an ordered scan
        long long candidates = -1;            // -1: the steps below read the row
        if (use_top_k) {
            unsigned long long base = 0;
            for (long long start = 0; start < n && base <= kCandidates; start += static_cast<long long>(THREADS) * kSpan) {
                const long long first = start + static_cast<long long>(threadIdx.x) * kSpan;
                float x[kUnroll][VEC];
                unsigned long long count = 0;
#pragma unroll
                for (int v = 0; v < kUnroll; ++v) {
                    load_elements<T, VEC>(row, first + v * VEC, n, aligned, x[v]);
#pragma unroll
                    for (int j = 0; j < VEC; ++j) count += first + v * VEC + j < n && order_key(x[v][j]) >= key_k;
                }
                unsigned long long total;
                unsigned long long slot = base + block_exclusive_scan<THREADS>(count, scratch, total);
#pragma unroll
                for (int v = 0; v < kUnroll; ++v)
#pragma unroll
                    for (int j = 0; j < VEC; ++j)
                        if (first + v * VEC + j < n && order_key(x[v][j]) >= key_k) {
                            if (slot < kCandidates) candidate_logit[slot] = x[v][j], candidate_index[slot] = static_cast<int>(first + v * VEC + j);
                            ++slot;
                        }
                base += total;
            }
            if (base <= kCandidates) candidates = static_cast<long long>(base);
            __syncthreads();
        }
        // Calls f(index, value, valid) for the row's elements, or for the candidates.
        const auto for_each_token = [&](auto&& f) {
            if (candidates >= 0) {
                for (long long c = threadIdx.x; c < candidates; c += THREADS) f(candidate_index[c], candidate_logit[c], true);
            } else {
                for_each_element<T, VEC, THREADS>(row, n, aligned, f);
            }
        };

        // 3. The set A (top-k, min-p): its mass and, for top-p, its mass by first digit.
        const bool use_top_p = top_p < 1.0f;
        if (use_top_p)
            for (int b = threadIdx.x; b < kBins; b += THREADS) mass_hist[b] = 0;
        __syncthreads();
        unsigned long long local_mass = 0;
        for_each_token([&](long long, float x, bool valid) {
            const unsigned key = order_key(x);
            const unsigned long long w = weight_of(x, max_logit, inv_temperature);
            const bool in_a = valid && key >= key_k && w != 0 && static_cast<float>(w) >= min_p * kWeightScale;
            if (in_a) local_mass += w;
            if (use_top_p) add_mass(mass_hist, key >> digit_shift(0), w, in_a);
        });
        unsigned long long kept_mass = block_sum<THREADS>(local_mass, scratch);

        // 4. top-p: the smallest key whose tokens of A hold top_p of A's mass.
        unsigned key_p = 0;
        if (use_top_p) {
            const double target = ceil(static_cast<double>(top_p) * static_cast<double>(kept_mass));
            unsigned long long need = target < 1.0 ? 1ull : static_cast<unsigned long long>(target);
            unsigned long long mass_above = 0;
            unsigned prefix = 0;
            for (int level = 0; level < 3; ++level) {
                if (level > 0) {
                    for (int b = threadIdx.x; b < kBins; b += THREADS) mass_hist[b] = 0;
                    __syncthreads();
                    const int shift_above = digit_shift(level - 1);
                    for_each_token([&](long long, float x, bool valid) {
                        const unsigned key = order_key(x);
                        const unsigned long long w = weight_of(x, max_logit, inv_temperature);
                        const bool in_a = valid && key >= key_k && w != 0 && static_cast<float>(w) >= min_p * kWeightScale;
                        add_mass(mass_hist, (key >> digit_shift(level)) & (digit_bins(level) - 1), w,
                                 in_a && (key >> shift_above) == prefix);
                    });
                }
                __syncthreads();
                if (threadIdx.x < 32)
                    select_from_top(mass_hist, static_cast<int>(digit_bins(level)), need, &selected_bin, &selected_above);
                __syncthreads();
                need -= selected_above;
                mass_above += selected_above;
                prefix = (prefix << (level == 2 ? 10 : 11)) | static_cast<unsigned>(selected_bin);
            }
            key_p = prefix;
            kept_mass = mass_above + mass_hist[selected_bin];  // the chosen key's tokens are kept whole
        }
        const unsigned key_min = key_k > key_p ? key_k : key_p;

        // 5. u in [0, kept mass), then the token where the running mass (in index order) passes it.
        const uint4 bits = philox(args.seed, make_uint4(static_cast<unsigned>(args.offsets[r]), static_cast<unsigned>(r),
                                                        static_cast<unsigned>(r >> 32), 0u));
        const unsigned long long random64 = (static_cast<unsigned long long>(bits.x) << 32) | bits.y;
        const unsigned long long u = __umul64hi(random64, kept_mass);
        if (threadIdx.x == 0) sampled = best_at;  // only if rounding left u past the last token
        const auto kept_weight = [&](float x) {
            const unsigned long long w = weight_of(x, max_logit, inv_temperature);
            return order_key(x) >= key_min && w != 0 && static_cast<float>(w) >= min_p * kWeightScale ? w : 0ull;
        };
        if (candidates >= 0) {
            // Thread t scans candidates [t * span, (t + 1) * span): index order across the block.
            const long long span = (candidates + THREADS - 1) / THREADS;
            const long long first = threadIdx.x * span, last = first + span < candidates ? first + span : candidates;
            unsigned long long sum = 0, total;
            for (long long c = first; c < last; ++c) sum += kept_weight(candidate_logit[c]);
            unsigned long long running = block_exclusive_scan<THREADS>(sum, scratch, total);
            if (u >= running && u < running + sum)
                for (long long c = first; c < last; ++c) {
                    const unsigned long long w = kept_weight(candidate_logit[c]);
                    if (u < running + w) {
                        sampled = candidate_index[c];
                        break;
                    }
                    running += w;
                }
            __syncthreads();
            if (threadIdx.x == 0) args.tokens[r] = static_cast<int>(sampled);
            __syncthreads();
            continue;
        }
        // Thread t scans elements [start + t * kSpan, + kSpan) of each step: index order across
        // the block, kUnroll vectors in flight a thread.
        unsigned long long base = 0;
        for (long long start = 0; start < n; start += static_cast<long long>(THREADS) * kSpan) {
            const long long first = start + static_cast<long long>(threadIdx.x) * kSpan;
            float x[kUnroll][VEC];
#pragma unroll
            for (int v = 0; v < kUnroll; ++v) load_elements<T, VEC>(row, first + v * VEC, n, aligned, x[v]);
            unsigned long long w[kSpan], sum = 0;
#pragma unroll
            for (int v = 0; v < kUnroll; ++v)
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    const unsigned long long wj = weight_of(x[v][j], max_logit, inv_temperature);
                    const bool kept = first + v * VEC + j < n && order_key(x[v][j]) >= key_min && wj != 0 &&
                                      static_cast<float>(wj) >= min_p * kWeightScale;
                    w[v * VEC + j] = kept ? wj : 0ull;
                    sum += w[v * VEC + j];
                }
            unsigned long long total;
            const unsigned long long before = base + block_exclusive_scan<THREADS>(sum, scratch, total);
            if (u >= before && u < before + sum) {
                unsigned long long running = before;
#pragma unroll
                for (int e = 0; e < kSpan; ++e) {
                    if (u < running + w[e]) {
                        sampled = first + e;
                        break;
                    }
                    running += w[e];
                }
            }
            base += total;
            if (base > u) break;  // uniform across the block: every thread has the same base
        }
        __syncthreads();
        if (threadIdx.x == 0) args.tokens[r] = static_cast<int>(sampled);
        __syncthreads();
    }
}

}  // namespace tileops
