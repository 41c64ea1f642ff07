// The GEMM kernels, as one template file: its content hash (with everything it includes) keys the
// GEMM's tuning entries and cached kernels, whichever kernel a config picks.
//   gemm_sm80_kernel: any sm_80+ (cp.async + mma.sync); gemm_sm90_kernel: sm_90a (TMA + wgmma);
//   gemm_skinny_kernel: any sm_80+, M <= 64 with B as N x K (streams B once, K split over warps).
#pragma once

#include "gemm_sm80.cuh"
#include "gemm_sm90.cuh"
#include "gemm_skinny.cuh"
