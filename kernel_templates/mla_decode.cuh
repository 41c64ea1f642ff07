// The MLA decode kernels, as one template file: its content hash (with everything it includes)
// keys the op's tuning entries and cached kernels, whichever kernel a config picks.
//   mla_decode_sm80_kernel: any sm_80+ (cp.async + mma.sync);
//   mla_decode_sm90_kernel: sm_90a (cp.async + wgmma);
//   mla_decode_seesaw_kernel: sm_90a (cp.async + mbarriers + wgmma, FlashMLA's seesaw schedule);
//   mla_merge_kernel: the merge of split partial results (mla_decode_common.cuh).
#pragma once

#include "mla_decode_sm80.cuh"
#include "mla_decode_sm90.cuh"
#include "mla_decode_seesaw.cuh"
