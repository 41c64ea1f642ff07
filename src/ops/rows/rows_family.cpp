// The row family: RMSNorm (with the residual add), LayerNorm, softmax and log-softmax over the
// last dimension of [rows, cols]. Kernels: kernel_templates/rows/.
#include <fmt/format.h>

#include "core/op_family.hpp"
#include "tileops/error.hpp"
#include "tileops/layernorm.hpp"
#include "tileops/rmsnorm.hpp"
#include "tileops/softmax.hpp"

namespace tileops::detail {
namespace {

constexpr const char* kShape = "rows x cols";

// The dtypes and rows x cols of a row problem, refusing any flag but `allowed`.
struct RowSpec {
    int64_t rows, cols;
    DTypePair dtypes;
    bool flag = false;  // `allowed` was given
};
RowSpec row_spec(const ProblemSpec& spec, const char* allowed) {
    require_rank(spec, 2, kShape);
    RowSpec row{spec.shape[0], spec.shape[1], parse_dtype_pair(spec.dtype)};
    for (const std::string& flag : split_flags(spec.flags)) {
        if (allowed != nullptr && flag == allowed) row.flag = true;
        else throw InvalidArgument(fmt::format("tileops: flag '{}' does not apply to {}", flag, spec.op));
    }
    return row;
}

std::unique_ptr<Op> make_rmsnorm(const ProblemSpec& spec) {
    const RowSpec r = row_spec(spec, "residual");
    return std::make_unique<RmsNorm>(RmsNormProblem{r.rows, r.cols, r.dtypes.in, r.dtypes.out, 1e-6f, r.flag});
}

std::unique_ptr<Op> make_layernorm(const ProblemSpec& spec) {
    const RowSpec r = row_spec(spec, nullptr);
    return std::make_unique<LayerNorm>(LayerNormProblem{r.rows, r.cols, r.dtypes.in, r.dtypes.out});
}

std::unique_ptr<Op> make_softmax(const ProblemSpec& spec) {
    const RowSpec r = row_spec(spec, nullptr);
    return std::make_unique<Softmax>(SoftmaxProblem{r.rows, r.cols, r.dtypes.in, r.dtypes.out, spec.op == "log_softmax"});
}

std::vector<std::unique_ptr<Op>> representative_ops() {
    std::vector<std::unique_ptr<Op>> ops;
    // Tiny, odd, round and long rows: every kernel kind (register, prefetch, resident in clusters).
    const int64_t shapes[][2] = {{1, 1}, {3, 7}, {37, 1000}, {5, 4097}, {16384, 1024}, {16384, 4096},
                                 {4096, 16384}, {1024, 65536}, {256, 262144}};
    for (DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
        for (const auto& s : shapes) {
            const int64_t rows = s[0], cols = s[1];
            ops.push_back(std::make_unique<RmsNorm>(RmsNormProblem{rows, cols, dtype}));
            ops.push_back(std::make_unique<RmsNorm>(RmsNormProblem{rows, cols, dtype, {}, 1e-6f, true}));
            ops.push_back(std::make_unique<LayerNorm>(LayerNormProblem{rows, cols, dtype}));
            ops.push_back(std::make_unique<Softmax>(SoftmaxProblem{rows, cols, dtype}));
            ops.push_back(std::make_unique<Softmax>(SoftmaxProblem{rows, cols, dtype, {}, true}));
        }
        ops.push_back(std::make_unique<RmsNorm>(RmsNormProblem{64, 4096, dtype, DType::fp32}));
    }
    return ops;
}

}  // namespace

OpFamily rows_family() {
    return {"rows",
            {{"rmsnorm", kShape, "residual", make_rmsnorm},
             {"layernorm", kShape, "", make_layernorm},
             {"softmax", kShape, "", make_softmax},
             {"log_softmax", kShape, "", make_softmax}},
            representative_ops};
}

}  // namespace tileops::detail
