// The flash attention kernels, as one template file: its content hash (with everything it
// includes) keys the op's tuning entries and cached kernels, whichever kernel a config picks.
//   flash_attention_sm80_kernel: any sm_80+ (cp.async + mma.sync);
//   flash_attention_sm90_kernel: sm_90a (TMA + wgmma, warp-specialized).
#pragma once

#include "flash_attention_sm80.cuh"
#include "flash_attention_sm90.cuh"
