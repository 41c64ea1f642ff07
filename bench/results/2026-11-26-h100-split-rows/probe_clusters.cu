// Probe: how many clusters of each size fit at once on this GPU, and how many SMs they cover.
#include <cstdio>
#include <set>
#include <vector>
#include <cuda_runtime.h>

__global__ void record_sm(int* smids, long long spin) {

    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (threadIdx.x == 0) smids[blockIdx.x] = smid;
    long long start = clock64();
    while (clock64() - start < spin) {}
}

int main() {
    cudaFuncSetAttribute(record_sm, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    cudaFuncSetAttribute(record_sm, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    int* smids;
    cudaMalloc(&smids, 4096 * sizeof(int));
    for (int threads : {1024, 512, 256}) {
        for (int smem : {0, 100 * 1024, 130 * 1024}) {
            printf("threads %4d smem %3d KB:", threads, smem / 1024);
            for (int cluster = 1; cluster <= 16; ++cluster) {
                cudaLaunchConfig_t cfg = {};
                cudaLaunchAttribute attr;
                attr.id = cudaLaunchAttributeClusterDimension;
                attr.val.clusterDim.x = cluster; attr.val.clusterDim.y = 1; attr.val.clusterDim.z = 1;
                cfg.gridDim = dim3(cluster * 64); cfg.blockDim = dim3(threads);
                cfg.dynamicSmemBytes = smem; cfg.attrs = &attr; cfg.numAttrs = 1;
                int clusters = 0;
                cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, record_sm, &cfg);
                if (e != cudaSuccess) { printf(" c%d:err", cluster); cudaGetLastError(); continue; }
                // Launch exactly that many clusters, all resident, and count distinct SMs.
                int grid = clusters * cluster;
                int sms = 0;
                if (grid > 0 && grid <= 4096) {
                    cfg.gridDim = dim3(grid);
                    long long spin = 200000;
                    if (cudaLaunchKernelEx(&cfg, record_sm, smids, spin) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess) {
                        std::vector<int> h(grid);
                        cudaMemcpy(h.data(), smids, grid * sizeof(int), cudaMemcpyDeviceToHost);
                        std::set<int> s(h.begin(), h.end());
                        sms = (int)s.size();
                    } else { cudaGetLastError(); sms = -1; }
                }
                printf(" c%d:%d/%dSM", cluster, clusters, sms);
            }
            printf("\n");
        }
    }
    return 0;
}
