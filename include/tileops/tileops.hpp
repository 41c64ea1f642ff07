// Everything a user of tileops-jit needs.
#pragma once

#include "tileops/decode_attention.hpp"
#include "tileops/device_info.hpp"
#include "tileops/elementwise.hpp"
#include "tileops/embedding.hpp"
#include "tileops/error.hpp"
#include "tileops/flash_attention.hpp"
#include "tileops/gemm.hpp"
#include "tileops/layernorm.hpp"
#include "tileops/mla_decode.hpp"
#include "tileops/op.hpp"
#include "tileops/rmsnorm.hpp"
#include "tileops/rope.hpp"
#include "tileops/runtime.hpp"
#include "tileops/sampling.hpp"
#include "tileops/softmax.hpp"
#include "tileops/tensor.hpp"
