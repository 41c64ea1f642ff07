// Elementwise and activation ops over [rows, cols] with row strides:
//
//   OP 0 gelu       y = a * Phi(a) = 0.5 a (1 + erf(a / sqrt 2)), computed as 0.5 a erfc(-a / sqrt 2)
//   OP 1 gelu_tanh  y = 0.5 a (1 + tanh(u)), u = sqrt(2 / pi) (a + 0.044715 a^3), computed as
//                   a sigmoid(2u)
// (both forms avoid the cancellation in 1 + erf / 1 + tanh for negative a; see common/math.cuh)
//   OP 2 silu       y = a * sigmoid(a)
//   OP 3 silu_mul   y = silu(a) * b           (the SwiGLU gate)
//   OP 4 add        y = a + b
//   OP 5 mul        y = a * b
//
// b with b_stride == 0 is one row broadcast to every row. Each block covers THREADS * VEC * UNROLL
// consecutive elements of a row (blockIdx.x) for the rows blockIdx.y, blockIdx.y + gridDim.y, ...
// All UNROLL loads are issued before any arithmetic so that they are in flight together.
// elementwise_ragged_kernel takes rows of any length and alignment at full vector width
// (common/row_frame.cuh): the blocks cover each row's body, the first block its edges too; a and
// y share a frame, and so does b unless it is broadcast (then read element by element where a
// row's head puts it off a vector).
#pragma once

#include "common/math.cuh"
#include "common/row_frame.cuh"
#include "common/whole_store.cuh"
#include "common/types.cuh"

namespace tileops {

// erfc(z) in the form of erfc_approx (common/math.cuh), t exp(-z^2 + P(t)) with t = 1 / (1 + |z| / 2),
// with P a degree-5 minimax fit of that exponent for |z| <= 9.5 (beyond, erfc is below fp32's
// range) instead of degree 9: relative error below 2e-5 for every z, far below the rounding of a
// 16-bit output, and four FMAs fewer an element, which bf16 gelu needs to stay bound by memory.
__device__ __forceinline__ float erfc_for_16bit(float z) {
    const float a = fabsf(z);
    const float t = fast_reciprocal(1.0f + 0.5f * a);
    float p = 0.228790295f;
    p = fmaf(p, t, -0.709190786f);
    p = fmaf(p, t, 0.474493047f);
    p = fmaf(p, t, 0.2544433f);
    p = fmaf(p, t, 1.01801351f);
    p = fmaf(p, t, -1.26654176f);
    const float r = t * fast_exp(fmaf(-a, a, p));
    return z >= 0.0f ? r : 2.0f - r;
}

// OP applied to one element; PRECISE: the output is fp32 (gelu takes the degree-9 erfc).
template <int OP, bool PRECISE>
__device__ __forceinline__ float elementwise_apply(float a, float b) {
    if constexpr (OP == 0) {
        const float z = -a * 0.70710678118654752f;
        return 0.5f * a * (PRECISE ? erfc_approx(z) : erfc_for_16bit(z));
    } else if constexpr (OP == 1) {
        const float u = 0.7978845608028654f * (a + 0.044715f * a * a * a);
        return a * sigmoid(2.0f * u);
    } else if constexpr (OP == 2) {
        return a * sigmoid(a);
    } else if constexpr (OP == 3) {
        return a * sigmoid(a) * b;
    } else if constexpr (OP == 4) {
        return a + b;
    } else {
        return a * b;
    }
}

template <typename T, typename TOut, int OP, int VEC, int UNROLL, int THREADS, bool RAGGED>
__device__ __forceinline__ void elementwise_rows(const T* a, long long a_stride, const T* b, long long b_stride,
                                                 TOut* y, long long y_stride, long long rows, long long cols) {
    static_assert(OP >= 0 && OP <= 5, "OP must be 0..5");
    static_assert(VEC >= 1 && (VEC & (VEC - 1)) == 0, "VEC must be a power of two");
    static_assert(UNROLL >= 1, "UNROLL must be >= 1");
    constexpr bool kBinary = OP >= 3;
    constexpr bool kPrecise = sizeof(TOut) == 4;
    const RowFrame<T, VEC, RAGGED> frame(a, a_stride, cols);
    const long long block_first = static_cast<long long>(blockIdx.x) * THREADS * VEC * UNROLL;
    for (long long row = blockIdx.y; row < rows; row += gridDim.y) {
        const int head = frame.head(row);
        const long long body = frame.body(row);
        if (RAGGED && blockIdx.x == 0) {
            // The row's edges, element by element.
            for (long long e = threadIdx.x; e < cols - body; e += THREADS) {
                const long long col = e < head ? e : body + e;
                const float fb = kBinary ? to_float(b[row * b_stride + col]) : 0.0f;
                y[row * y_stride + col] = from_float<TOut>(elementwise_apply<OP, kPrecise>(to_float(a[row * a_stride + col]), fb));
            }
        }
        const T* a_row = a + row * a_stride + head;
        const T* b_row = kBinary ? b + row * b_stride + head : nullptr;
        TOut* y_row = y + row * y_stride + head;
        // A ragged row's broadcast b may sit off a vector where the row's body starts.
        const bool b_aligned = !RAGGED || !kBinary || vector_aligned<T, VEC>(b + row * b_stride, head);
        Vec<T, VEC> va[UNROLL], vb[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const long long col = block_first + (static_cast<long long>(u) * THREADS + threadIdx.x) * VEC;
            if (col < body) {
                va[u] = load_raw<T, VEC>(a_row + col);
                if constexpr (kBinary) vb[u] = load_side<T, VEC>(b_row + col, b_aligned);
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const long long col = block_first + (static_cast<long long>(u) * THREADS + threadIdx.x) * VEC;
            if (col >= body) continue;
            float fa[VEC], fb[VEC], out[VEC];
            unpack(va[u], fa);
            if constexpr (kBinary) unpack(vb[u], fb);
#pragma unroll
            for (int k = 0; k < VEC; ++k) out[k] = elementwise_apply<OP, kPrecise>(fa[k], kBinary ? fb[k] : 0.0f);
            store_whole<TOut, VEC>(y_row + col, out);
        }
    }
}

template <typename T, typename TOut, int OP, int VEC, int UNROLL, int THREADS>
__global__ void __launch_bounds__(THREADS)
    elementwise_kernel(const T* a, long long a_stride, const T* b, long long b_stride, TOut* y, long long y_stride,
                       long long rows, long long cols) {
    elementwise_rows<T, TOut, OP, VEC, UNROLL, THREADS, false>(a, a_stride, b, b_stride, y, y_stride, rows, cols);
}

template <typename T, typename TOut, int OP, int VEC, int UNROLL, int THREADS>
__global__ void __launch_bounds__(THREADS)
    elementwise_ragged_kernel(const T* a, long long a_stride, const T* b, long long b_stride, TOut* y,
                              long long y_stride, long long rows, long long cols) {
    elementwise_rows<T, TOut, OP, VEC, UNROLL, THREADS, true>(a, a_stride, b, b_stride, y, y_stride, rows, cols);
}

}  // namespace tileops
