// Litmus kernels for compute-sanitizer racecheck: the two shared-memory hand-offs that racecheck
// reports in the flash-attention and MLA-decode kernels, each written here in its smallest
// correct form. If racecheck reports hazards on these, it cannot see the ordering that makes them
// correct, and its reports on the kernels are of the same kind (docs/testing.md).
//
//   nvcc -arch=sm_90a -I kernel_templates -o litmus tools/sanitizer_litmus.cu && compute-sanitizer --tool racecheck ./litmus
//
// 1. slot_handoff: a producer thread writes an int slot, consumers read it after waiting on a
//    "full" mbarrier, and their warps' lane 0 arrive (after __syncwarp) on an "empty" mbarrier the
//    producer waits on before it writes the next value (flash attention's dynamic scheduler).
// 2. cp_async_handoff: one warp copies a tile with cp.async and makes an mbarrier count each
//    thread's copies (cp.async.mbarrier.arrive.noinc); another warp waits on it and reads the tile
//    (MLA decode's loads).
#include <cstdio>

#include "arch/hopper.cuh"  // the mbarrier helpers the kernels use

namespace {

using tileops::mbarrier_arrive;
using tileops::mbarrier_init;
using tileops::mbarrier_wait;
using tileops::shared_address;

constexpr int kConsumerWarps = 4;
constexpr int kRounds = 8;

// Thread 0 produces; warps 1..kConsumerWarps consume every value.
__global__ void slot_handoff(int* out) {
    __shared__ unsigned long long full, empty;
    __shared__ volatile int slot;
    if (threadIdx.x == 0) {
        mbarrier_init(&full, 1);
        mbarrier_init(&empty, kConsumerWarps);
        tileops::fence_barrier_init();
    }
    __syncthreads();
    const int warp = threadIdx.x / 32;
    unsigned phase = 0;
    if (warp == 0) {
        if (threadIdx.x != 0) return;
        for (int r = 0; r < kRounds; ++r, phase ^= 1) {
            mbarrier_wait(&empty, phase ^ 1);  // every consumer warp read the previous value
            slot = r * 7 + 1;
            mbarrier_arrive(&full);
        }
        return;
    }
    int sum = 0;
    for (int r = 0; r < kRounds; ++r, phase ^= 1) {
        mbarrier_wait(&full, phase);
        sum += slot;
        __syncwarp();
        if (threadIdx.x % 32 == 0) mbarrier_arrive(&empty);
    }
    out[threadIdx.x] = sum;
}

// Warp 0 copies 32 x 16 bytes with cp.async; warp 1 reads them after the mbarrier completes.
__global__ void cp_async_handoff(const int4* in, int* out) {
    __shared__ alignas(16) int4 tile[32];
    __shared__ unsigned long long landed;
    if (threadIdx.x == 0) {
        mbarrier_init(&landed, 32);
        tileops::fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared_address(&tile[threadIdx.x])), "l"(in + threadIdx.x)
                     : "memory");
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(shared_address(&landed)) : "memory");
    } else {
        mbarrier_wait(&landed, 0);
        const int4 v = tile[threadIdx.x - 32];
        out[threadIdx.x - 32] = v.x + v.y + v.z + v.w;
    }
}

bool check(cudaError_t status, const char* what) {
    if (status == cudaSuccess) return true;
    std::printf("%s: %s\n", what, cudaGetErrorString(status));
    return false;
}

}  // namespace

int main() {
    int *out = nullptr, *out2 = nullptr;
    int4* in = nullptr;
    if (!check(cudaMalloc(&out, 32 * (kConsumerWarps + 1) * sizeof(int)), "cudaMalloc") ||
        !check(cudaMalloc(&out2, 32 * sizeof(int)), "cudaMalloc") || !check(cudaMalloc(&in, 32 * sizeof(int4)), "cudaMalloc"))
        return 1;
    int4 host_in[32];
    for (int i = 0; i < 32; ++i) host_in[i] = make_int4(i, 2 * i, 3 * i, 4 * i);
    cudaMemcpy(in, host_in, sizeof host_in, cudaMemcpyHostToDevice);
    slot_handoff<<<1, 32 * (kConsumerWarps + 1)>>>(out);
    cp_async_handoff<<<1, 64>>>(in, out2);
    if (!check(cudaDeviceSynchronize(), "kernels")) return 1;
    int host_out[32 * (kConsumerWarps + 1)], host_out2[32];
    cudaMemcpy(host_out, out, sizeof host_out, cudaMemcpyDeviceToHost);
    cudaMemcpy(host_out2, out2, sizeof host_out2, cudaMemcpyDeviceToHost);
    int expected = 0;
    for (int r = 0; r < kRounds; ++r) expected += r * 7 + 1;
    bool ok = true;
    for (int t = 32; t < 32 * (kConsumerWarps + 1); ++t) ok &= host_out[t] == expected;
    for (int i = 0; i < 32; ++i) ok &= host_out2[i] == 10 * i;
    std::printf("litmus results %s\n", ok ? "correct" : "WRONG");
    return ok ? 0 : 1;
}
