// The module's parts: each binds the ops of one group to the module `_C`.
#pragma once

#include <fmt/format.h>
#include <pybind11/pybind11.h>

#include "call.hpp"
#include "tileops/error.hpp"

namespace tileops::python {

void bind_rows(py::module_& m);       // rms_norm, layer_norm, softmax, elementwise
void bind_gemm(py::module_& m);       // gemm
void bind_attention(py::module_& m);  // flash_attention, decode_attention, mla_decode
void bind_model_ops(py::module_& m);  // embedding, rope, sampling
void bind_quantize(py::module_& m);   // quantize (fp8 e4m3 activations)
void bind_gemm_fp8(py::module_& m);   // gemm_fp8 (e4m3 codes, fp32 scales)
void bind_gemm_grouped(py::module_& m);  // gemm_grouped (mixture-of-experts layers)
void bind_moe_routing(py::module_& m);   // moe_topk, moe_permute, moe_unpermute

}  // namespace tileops::python
