// Litmus kernels for compute-sanitizer: the shared-memory hand-offs that racecheck reports in
// the flash-attention and MLA-decode kernels, and the cluster reduction that faults under
// synccheck in the row kernels, each in its smallest correct form. If a tool reports on these, it
// cannot model the ordering that makes them correct, and its reports on the kernels are of the
// same kind (docs/testing.md).
//
//   nvcc -arch=sm_90a -I kernel_templates -o litmus tools/sanitizer_litmus.cu
//   compute-sanitizer --tool racecheck ./litmus; compute-sanitizer --tool synccheck ./litmus
//
// 1. slot_handoff: a producer thread writes an int slot, consumers read it after waiting on a
//    "full" mbarrier, and their warps' lane 0 arrive (after __syncwarp) on an "empty" mbarrier the
//    producer waits on before it writes the next value (flash attention's dynamic scheduler).
// 2. cp_async_handoff: one warp copies a tile with cp.async and makes an mbarrier count each
//    thread's copies (cp.async.mbarrier.arrive.noinc); another warp waits on it and reads the tile
//    (MLA decode's loads).
// 3. named_barrier_handoff: two warpgroups trade per-row values through shared memory, each
//    writing and then announcing them with bar.arrive on a named barrier the other waits on with
//    bar.sync (MLA decode's seesaw kernel trades its softmax scales so).
// 4. cluster_sum<N, T>: the row kernels' RowReducer summing over a cluster of N CTAs of T threads
//    (st.async pushes into every peer's shared memory, counted on the peer's mbarrier), N = 4 to 16,
//    in one wave of clusters and in many.
#include <cstdio>
#include <vector>

#include "arch/hopper.cuh"  // the mbarrier helpers the kernels use
#include "rows/reduce.cuh"  // the row kernels' cluster reduction

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

// Warpgroup 0 writes a row of `mine`, announces it on barrier 1 and waits on barrier 2 for
// warpgroup 1's row of `theirs`, which warpgroup 1 writes after reading `mine`; kRounds times.
__global__ void named_barrier_handoff(int* out) {
    __shared__ int mine[128], theirs[128];
    const int t = threadIdx.x % 128;
    int sum = 0;
    for (int r = 0; r < kRounds; ++r) {
        if (threadIdx.x < 128) {
            mine[t] = r + t;
            tileops::named_barrier_arrive(1, 256);
            tileops::named_barrier_sync(2, 256);
            sum += theirs[127 - t];
        } else {
            tileops::named_barrier_sync(1, 256);
            const int seen = mine[127 - t];
            theirs[t] = 2 * seen;
            tileops::named_barrier_arrive(2, 256);
            sum += seen;
        }
    }
    out[threadIdx.x] = sum;
}

bool check(cudaError_t status, const char* what) {
    if (status == cudaSuccess) return true;
    std::printf("%s: %s\n", what, cudaGetErrorString(status));
    return false;
}

constexpr int kClusterReductions = 5;  // both buffers, each reused
constexpr int kManyClusters = 70;     // a row each: rmsnorm 70 x 262144's grid without prefetch

// Every CTA of the cluster sums the values of all its threads, kClusterReductions times (small
// integers, so every order of summation gives the same float).
template <int CLUSTER, int THREADS>
__global__ void cluster_sum(float* out) {
    using Reducer = tileops::RowReducer<THREADS, 1, CLUSTER>;
    __shared__ typename Reducer::Shared shared;
    Reducer reducer(shared);
    float total = 0.0f;
    for (int k = 0; k < kClusterReductions; ++k)
        total += reducer.template reduce<tileops::SumOp>(static_cast<float>((k + 1) * ((blockIdx.x * THREADS + threadIdx.x) % 7)));
    reducer.finish();
    if (threadIdx.x == 0) out[blockIdx.x] = total;
}

// `clusters` clusters of CLUSTER CTAs: a few (one wave) or many more than the GPU holds at once
// (waves of clusters, as a row kernel without a persistent grid launches one per row).
template <int CLUSTER, int THREADS>
bool run_cluster_sum(float* out, int clusters) {
    const auto kernel = cluster_sum<CLUSTER, THREADS>;
    if (CLUSTER > 8 && !check(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
                              "non-portable cluster size"))
        return false;
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = CLUSTER;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(clusters * CLUSTER);
    config.blockDim = dim3(THREADS);
    config.attrs = &attribute;
    config.numAttrs = 1;
    if (!check(cudaLaunchKernelEx(&config, kernel, out), "cluster launch") || !check(cudaDeviceSynchronize(), "cluster_sum"))
        return false;
    std::vector<float> host(static_cast<size_t>(clusters) * CLUSTER);
    cudaMemcpy(host.data(), out, host.size() * sizeof(float), cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int c = 0; c < clusters; ++c) {
        long expected = 0;
        for (int k = 0; k < kClusterReductions; ++k)
            for (int t = 0; t < CLUSTER * THREADS; ++t) expected += (k + 1) * ((c * CLUSTER * THREADS + t) % 7);
        for (int b = 0; b < CLUSTER; ++b) ok &= host[c * CLUSTER + b] == static_cast<float>(expected);
    }
    std::printf("cluster_sum<%d, %d> x %d clusters %s\n", CLUSTER, THREADS, clusters, ok ? "correct" : "WRONG");
    return ok;
}

}  // namespace

int main() {
    int *out = nullptr, *out2 = nullptr, *out3 = nullptr;
    int4* in = nullptr;
    if (!check(cudaMalloc(&out, 32 * (kConsumerWarps + 1) * sizeof(int)), "cudaMalloc") ||
        !check(cudaMalloc(&out2, 32 * sizeof(int)), "cudaMalloc") ||
        !check(cudaMalloc(&out3, 256 * sizeof(int)), "cudaMalloc") || !check(cudaMalloc(&in, 32 * sizeof(int4)), "cudaMalloc"))
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
    named_barrier_handoff<<<1, 256>>>(out3);
    if (!check(cudaDeviceSynchronize(), "named_barrier_handoff")) return 1;
    int host_out3[256];
    cudaMemcpy(host_out3, out3, sizeof host_out3, cudaMemcpyDeviceToHost);
    for (int t = 0; t < 256; ++t) {
        int expected3 = 0;
        for (int r = 0; r < kRounds; ++r) expected3 += t < 128 ? 2 * (r + t) : r + 127 - t % 128;
        ok &= host_out3[t] == expected3;
    }
    std::printf("hand-offs %s\n", ok ? "correct" : "WRONG");
    float* sums = nullptr;
    if (!check(cudaMalloc(&sums, kManyClusters * 16 * sizeof(float)), "cudaMalloc")) return 1;
    for (int clusters : {4, kManyClusters}) {
        ok &= run_cluster_sum<4, 128>(sums, clusters);
        ok &= run_cluster_sum<8, 128>(sums, clusters);
        ok &= run_cluster_sum<16, 32>(sums, clusters);
        ok &= run_cluster_sum<16, 128>(sums, clusters);
        ok &= run_cluster_sum<16, 512>(sums, clusters);
        ok &= run_cluster_sum<16, 1024>(sums, clusters);
    }
    return ok ? 0 : 1;
}
