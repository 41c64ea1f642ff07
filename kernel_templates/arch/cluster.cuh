// Thread-block clusters and mbarriers (sm_90): 64-bit barrier objects in shared memory that count
// arrivals and the bytes of asynchronous copies (TMA, st.async), and the cluster's rank and
// barrier. Shared by the GEMM and attention templates (through hopper.cuh) and by the row ops'
// cluster reductions. Needs sm_90; nothing here is used where the arch is older.
#pragma once

#include "arch/shared_address.cuh"

namespace tileops {

// --- mbarriers (64-bit barrier objects in shared memory) ---

__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count));
}

// Makes barrier initialisation visible to the async proxy (TMA) and to the other threads.
__device__ __forceinline__ void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Arrives and tells the barrier to also wait for `bytes` of asynchronous (TMA) writes.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
}

// Arrives on the barrier at the same shared-memory offset in the cluster's block `rank`.
// Plain (.release.cta) semantics, not .release.cluster: what the arrival announces ("done reading
// this buffer") needs no ordering of this thread's memory writes at cluster scope, and the
// cluster-scope release costs a fence on every arrival (GEMM block pairs ran 2-4x slower with it).
__device__ __forceinline__ void mbarrier_arrive_cluster(unsigned long long* bar, unsigned rank) {
    asm volatile(
        "{\n"
        ".reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
        "}\n" ::"r"(shared_address(bar)),
        "r"(rank)
        : "memory");
}

// --- clusters ---

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}

// Every thread of every block of the cluster arrives, then waits for all (shared memory and
// barriers of the other blocks are safe to use after it, and stay alive until it).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The two halves of cluster_sync, for work to go between them: arrive announces this thread (what
// it wrote before is released to the cluster), wait returns once every thread of the cluster has
// arrived.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// Waits until the barrier's phase of parity `phase` has completed. A fresh barrier counts as having
// completed the phase before its first, so waiting for parity 1 on it returns at once.
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned phase) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "wait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_%=;\n"
        "}\n" ::"r"(shared_address(bar)),
        "r"(phase)
        : "memory");
}

}  // namespace tileops
