// Programmatic dependent launch (sm_90+). The runtime launches kernels with programmatic stream
// serialization, so a kernel may start while the previous kernel on its stream is still finishing:
// its launch and set-up overlap that kernel's last wave instead of following it.
//
// Every kernel calls begin_dependent_grid() before its first global memory access: it waits until
// the previous grid has completed and its writes are visible (exactly what stream order gave),
// then lets the next kernel launch early in turn. Both are no-ops on a launch without the
// attribute and below sm_90.
#pragma once

namespace tileops {

__device__ __forceinline__ void begin_dependent_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace tileops
