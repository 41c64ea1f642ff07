// -infinity as a compile-time float, for the identities of max reductions and masked scores.
//
// The IEEE bit pattern of +infinity, as cuda::std::numeric_limits<float>::infinity() builds it
// under NVRTC (which has no __builtin_huge_valf): including <cuda/std/limits> for it cost about
// 170 ms of NVRTC front end in every kernel that did (a row op compiled in 250 ms instead of 90).
#pragma once

namespace tileops {

inline constexpr float kNegativeInfinity = -__builtin_bit_cast(float, 0x7f800000u);

}  // namespace tileops
