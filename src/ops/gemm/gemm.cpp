// GEMM: problem checks, tuning key and kernel choice (GemmModel), operand checks and the launch.
// Kernels: kernel_templates/gemm/: gemm_sm80.cuh (any sm_80+), gemm_sm90.cuh (sm_90a: TMA + wgmma) and
// gemm_skinny.cuh (M <= 64, B as N x K).
// Configs: gemm_config.cpp.
#include "tileops/gemm.hpp"

#include <any>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/launch.hpp"
#include "core/op_model.hpp"
#include "core/validation.hpp"
#include "cuda/driver.hpp"
#include "gemm/gemm_args.cuh"  // kernel_templates/: the kernels' argument block
#include "ops/gemm/gemm_config.hpp"
#include "tileops/error.hpp"

namespace tileops {

const char* gemm_layout_name(GemmLayout layout) noexcept { return layout == GemmLayout::nt ? "nt" : "nn"; }

const char* gemm_epilogue_name(GemmEpilogue epilogue) noexcept {
    switch (epilogue) {
        case GemmEpilogue::none: return "none";
        case GemmEpilogue::gelu: return "gelu";
        case GemmEpilogue::silu: return "silu";
    }
    return "none";
}

namespace detail {
namespace {

constexpr int64_t kMaxBatch = 65535;  // gridDim.z of the sm_80 kernel

bool nt(const GemmProblem& p) { return p.layout == GemmLayout::nt; }
int64_t b_rows(const GemmProblem& p) { return nt(p) ? p.n : p.k; }
int64_t b_cols(const GemmProblem& p) { return nt(p) ? p.k : p.n; }

// The leading dimension to use: `ld`, or `cols` when it is 0; never shorter than a row.
int64_t leading_dimension(const char* name, int64_t ld, int64_t cols) {
    if (ld == 0) return cols;
    if (ld < cols)
        throw InvalidArgument(fmt::format("tileops::Gemm: {} = {} is smaller than a row ({} elements); rows may not overlap",
                                          name, ld, cols));
    return ld;
}

// Elements from one matrix's first element to one past its last.
int64_t matrix_extent(int64_t rows, int64_t cols, int64_t ld) { return (rows - 1) * ld + cols; }

int64_t batch_stride(const char* name, int64_t stride, int64_t batch, int64_t rows, int64_t cols, int64_t ld,
                     bool output) {
    const int64_t packed = rows * ld;
    if (stride == 0) return packed;
    if (stride < 0) throw InvalidArgument(fmt::format("tileops::Gemm: {} = {} is negative", name, stride));
    // Outputs of different batch entries must not overlap (their blocks would race); inputs may.
    if (output && batch > 1 && stride < matrix_extent(rows, cols, ld))
        throw InvalidArgument(fmt::format("tileops::Gemm: {} = {} makes batch entries of {} overlap (need >= {})",
                                          name, stride, output ? "D" : "C", matrix_extent(rows, cols, ld)));
    return stride;
}

GemmProblem normalized(GemmProblem p) {
    const int64_t dims[] = {p.m, p.n, p.k};
    const char* names[] = {"m", "n", "k"};
    for (int i = 0; i < 3; ++i) {
        if (dims[i] < 1) throw InvalidArgument(fmt::format("tileops::Gemm: {} must be >= 1, got {}", names[i], dims[i]));
        if (dims[i] > (int64_t{1} << 31) - 1)
            throw InvalidArgument(fmt::format("tileops::Gemm: {} = {} is larger than supported (2^31 - 1)", names[i], dims[i]));
    }
    if (p.dtype != DType::fp16 && p.dtype != DType::bf16)
        throw Unsupported(fmt::format("tileops::Gemm: dtype {} is not supported for A and B (fp16 or bf16)", dtype_name(p.dtype)));
    if (!p.out_dtype) p.out_dtype = p.dtype;
    check_float_dtype("Gemm", "out_dtype", *p.out_dtype);
    if (p.layout != GemmLayout::nn && p.layout != GemmLayout::nt)
        throw InvalidArgument(fmt::format("tileops::Gemm: layout {} is not nn or nt", static_cast<int>(p.layout)));
    if (p.epilogue != GemmEpilogue::none && p.epilogue != GemmEpilogue::gelu && p.epilogue != GemmEpilogue::silu)
        throw InvalidArgument(fmt::format("tileops::Gemm: epilogue {} is not none, gelu or silu", static_cast<int>(p.epilogue)));
    if (!std::isfinite(p.alpha) || !std::isfinite(p.beta))
        throw InvalidArgument(fmt::format("tileops::Gemm: alpha and beta must be finite, got {} and {}", p.alpha, p.beta));
    if (p.beta != 0.0f && !p.has_c)
        throw InvalidArgument(fmt::format("tileops::Gemm: beta = {} needs C: set has_c (and pass C to run())", p.beta));
    // The kernels read C whenever it is given, and 0 x NaN is NaN: BLAS leaves C unread at beta = 0.
    if (p.beta == 0.0f && p.has_c)
        throw InvalidArgument("tileops::Gemm: has_c with beta = 0 would still read C (NaN or Inf there reaches D): "
                              "leave has_c unset when beta is 0");
    if (p.batch < 1 || p.batch > kMaxBatch)
        throw InvalidArgument(fmt::format("tileops::Gemm: batch = {} is not in [1, {}]", p.batch, kMaxBatch));
    p.lda = leading_dimension("lda", p.lda, p.k);
    p.ldb = leading_dimension("ldb", p.ldb, b_cols(p));
    p.ldc = leading_dimension("ldc", p.ldc, p.n);
    p.ldd = leading_dimension("ldd", p.ldd, p.n);
    // Every offset the kernels form must fit in 64 bits: check the largest one, with headroom.
    const int64_t limit = int64_t{1} << 50;
    for (auto [name, ld] : {std::pair{"lda", p.lda}, {"ldb", p.ldb}, {"ldc", p.ldc}, {"ldd", p.ldd}})
        if (ld > limit / std::max(p.m, std::max(p.n, p.k)))
            throw InvalidArgument(fmt::format("tileops::Gemm: {} = {} is larger than supported", name, ld));
    p.batch_stride_a = batch_stride("batch_stride_a", p.batch_stride_a, p.batch, p.m, p.k, p.lda, false);
    p.batch_stride_b = batch_stride("batch_stride_b", p.batch_stride_b, p.batch, b_rows(p), b_cols(p), p.ldb, false);
    p.batch_stride_c = batch_stride("batch_stride_c", p.batch_stride_c, p.batch, p.m, p.n, p.ldc, false);
    p.batch_stride_d = batch_stride("batch_stride_d", p.batch_stride_d, p.batch, p.m, p.n, p.ldd, true);
    for (auto [name, stride] : {std::pair{"batch_stride_a", p.batch_stride_a}, {"batch_stride_b", p.batch_stride_b},
                                {"batch_stride_c", p.batch_stride_c}, {"batch_stride_d", p.batch_stride_d}})
        if (stride > limit / p.batch)
            throw InvalidArgument(fmt::format("tileops::Gemm: {} = {} is larger than supported", name, stride));
    return p;
}

const char* activation_index(GemmEpilogue e) { return e == GemmEpilogue::gelu ? "1" : e == GemmEpilogue::silu ? "2" : "0"; }

}  // namespace

class GemmModel final : public OpModel {
public:
    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;
    const GemmProblem& problem() const noexcept { return p_; }
    explicit GemmModel(const GemmProblem& p)
        : p_(p),
          shape_{p.batch, p.m, p.n, p.k, dtype_size(p.dtype), nt(p), dtype_size(*p.out_dtype)},
          // 16-byte copies need every row of A and B (and of D, where the TMA kernel stores it with
          // TMA) to start 16 bytes apart from the last.
          shape_vec_(widest_dividing_vector(8, {p.lda, p.ldb, p.batch > 1 ? p.batch_stride_a : 0,
                                                p.batch > 1 ? p.batch_stride_b : 0,
                                                shape_.out_bytes == 2 ? p.ldd : 0,
                                                shape_.out_bytes == 2 && p.batch > 1 ? p.batch_stride_d : 0})) {}

    std::string op_name() const override { return "gemm"; }
    std::vector<long long> shape() const override {
        if (p_.batch > 1) return {p_.batch, p_.m, p_.n, p_.k};
        return {p_.m, p_.n, p_.k};
    }
    std::string dtype_key() const override {
        if (p_.dtype == *p_.out_dtype) return dtype_name(p_.dtype);
        return fmt::format("{}->{}", dtype_name(p_.dtype), dtype_name(*p_.out_dtype));
    }
    // The options that change the kernel, in a fixed order: "nt,beta,bias,gelu".
    std::string flags() const override {
        std::string text;
        auto add = [&](const char* flag) { text += (text.empty() ? "" : ",") + std::string(flag); };
        if (nt(p_)) add("nt");
        if (p_.has_c) add("beta");
        if (p_.bias) add("bias");
        if (p_.epilogue != GemmEpilogue::none) add(gemm_epilogue_name(p_.epilogue));
        return text;
    }

    Config heuristic(const DeviceInfo& device) const override {
        return restrict_aligned(gemm_heuristic(shape_, device), device).to_config();
    }
    std::vector<Config> search_space(const DeviceInfo& device) const override {
        // On sm_90, where the TMA kernel can take the problem, the sm_80 kernel is only slower (a
        // third of its speed on H100) and slow to compile: not searched.
        const bool tma = device.sm() == 90 && !aligned_rows_refusal(GemmConfig{kGemmSm90});
        std::vector<Config> space;
        for (const GemmConfig& c : gemm_search_space(shape_, device))
            if (!aligned_rows_refusal(c) && !(tma && c.kernel == kGemmSm80)) space.push_back(c.to_config());
        return space;
    }
    std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const override {
        GemmConfig c;
        try {
            c = GemmConfig::from(config);
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        if (auto reason = aligned_rows_refusal(c)) return reason;
        return gemm_invalid_reason(c, shape_, device);
    }
    // Split K: the tiles' counters and partial sums (gemm_reduce_splits in gemm_sm90.cuh).
    size_t workspace_bytes(const Config& config) const override {
        return GemmSplitWorkspace::of(GemmConfig::from(config), shape_).bytes();
    }
    std::vector<int> vector_widths(const Config& config) const override {
        return halving_widths(std::min(static_cast<int>(config.at("vec")), shape_vec_));
    }

    LaunchPlan plan(const Config& config, int vec, const DeviceInfo& device) const override {
        GemmConfig c = GemmConfig::from(config);
        // TMA and the skinny kernel need 16-byte aligned rows and pointers: anything else runs on
        // the sm_80 kernel.
        if (c.kernel != kGemmSm80 && vec < 8) c = gemm_sm80_heuristic(shape_, device);
        LaunchPlan plan;
        plan.shared_bytes = c.shared_bytes(shape_);
        plan.block[0] = static_cast<unsigned>(c.threads());
        const std::string types = fmt::format("{}, {}, {}", device_type_name(p_.dtype), device_type_name(*p_.out_dtype),
                                              nt(p_) ? "true" : "false");
        const std::string epilogue = fmt::format("{}, {}, {}", p_.has_c ? "true" : "false", p_.bias ? "true" : "false",
                                                 activation_index(p_.epilogue));
        if (c.kernel == kGemmSm90) {
            plan.template_file = "gemm/gemm_sm90.cuh";
            plan.name_expression =
                fmt::format("tileops::gemm_sm90_kernel<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}>", types, c.block_m, c.block_n,
                            c.block_k, c.stages, c.consumers, c.pingpong ? "true" : "false", c.cluster, c.group_m, epilogue);
            // Persistent: one block per SM at most, each (pair) walking units of `cluster` tiles.
            const int64_t units = (p_.m + c.block_m * c.cluster - 1) / (c.block_m * c.cluster) *
                                  ((p_.n + c.block_n - 1) / c.block_n) * p_.batch * c.split_k;
            plan.grid[0] = static_cast<unsigned>(std::min<int64_t>(units, device.sm_count / c.cluster) * c.cluster);
            plan.cluster = static_cast<unsigned>(c.cluster);
            plan.persistent = true;
            plan.details = GemmTmaLaunch{c.block_m, c.block_n, c.split_k, c.cluster == 2, GemmSplitWorkspace::of(c, shape_)};
        } else if (c.kernel == kGemmSkinny) {
            plan.template_file = "gemm/gemm_skinny.cuh";
            plan.name_expression = fmt::format("tileops::gemm_skinny_kernel<{}, {}, {}, {}, {}, {}, {}>",
                                               device_type_name(p_.dtype), device_type_name(*p_.out_dtype), c.block_m,
                                               c.block_n, c.warps, c.stages, epilogue);
            plan.grid[0] = static_cast<unsigned>((p_.n + c.block_n - 1) / c.block_n);
            plan.grid[1] = static_cast<unsigned>((p_.m + c.block_m - 1) / c.block_m);
            plan.grid[2] = static_cast<unsigned>(p_.batch);
        } else {
            plan.template_file = "gemm/gemm_sm80.cuh";
            plan.name_expression =
                fmt::format("tileops::gemm_sm80_kernel<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}>", types, c.block_m, c.block_n,
                            c.block_k, c.warps_m, c.warps_n, c.stages, c.group_m, vec, epilogue);
            plan.grid[0] = static_cast<unsigned>(gemm_tiles(c, shape_) / p_.batch);
            plan.grid[2] = static_cast<unsigned>(p_.batch);
        }
        return plan;
    }

    std::vector<OperandSpec> operands() const override {
        // A batch is described as one tall matrix whose rows cover every entry (the autotuner
        // allocates (rows - 1) * stride + cols elements).
        auto spec = [&](const char* name, DType dtype, int64_t rows, int64_t cols, int64_t ld, int64_t stride, bool out) {
            const int64_t extent = (p_.batch - 1) * stride + matrix_extent(rows, cols, ld);
            return OperandSpec{name, dtype, (extent - cols + ld - 1) / ld + 1, cols, ld, out};
        };
        std::vector<OperandSpec> list{spec("A", p_.dtype, p_.m, p_.k, p_.lda, p_.batch_stride_a, false),
                                      spec("B", p_.dtype, b_rows(p_), b_cols(p_), p_.ldb, p_.batch_stride_b, false)};
        if (p_.has_c) list.push_back(spec("C", *p_.out_dtype, p_.m, p_.n, p_.ldc, p_.batch_stride_c, false));
        if (p_.bias) list.push_back({"bias", p_.dtype, 0, p_.n, p_.n, false});
        list.push_back(spec("D", *p_.out_dtype, p_.m, p_.n, p_.ldd, p_.batch_stride_d, true));
        return list;
    }

    int shape_vec() const noexcept { return shape_vec_; }

private:
    // Why the TMA or the skinny kernel cannot take this problem at all (it is checked per config).
    std::optional<std::string> aligned_rows_refusal(const GemmConfig& c) const {
        if (c.kernel == kGemmSm80 || shape_vec_ >= 8) return std::nullopt;
        return fmt::format("kernel {} ({}) needs leading dimensions and batch strides that are multiples of 16 bytes", c.kernel,
                           c.kernel == kGemmSm90 ? "TMA" : "skinny");
    }
    GemmConfig restrict_aligned(const GemmConfig& c, const DeviceInfo& device) const {
        return aligned_rows_refusal(c) ? gemm_sm80_heuristic(shape_, device) : c;
    }

    GemmProblem p_;
    GemmShape shape_;
    int shape_vec_;
};

namespace {

// One operand: a pointer (or a 2-D view for batch 1, a 3-D [batch, rows, cols] view otherwise).
// Returns its memory, p.batch matrices, for the overlap checks.
template <typename Arg>
RowsSpan check_gemm_operand(const GemmProblem& p, const char* name, const Arg& arg, DType dtype, int64_t rows,
                            int64_t cols, int64_t ld, int64_t stride) {
    const TensorView* view = arg.view();
    const bool batched_view = p.batch > 1 && view != nullptr && view->rank == 3;
    if (p.batch > 1 && view != nullptr && !batched_view)
        throw InvalidArgument(fmt::format("tileops::Gemm: argument '{}' must be a rank-3 view [{}, {}, {}] (batch {}), got rank {}",
                                          name, p.batch, rows, cols, p.batch, view->rank));
    RowsSpan span = check_operand("Gemm", name, arg.data(), batched_view ? nullptr : view, dtype, rows, cols, ld);
    span.batch = p.batch;
    span.batch_stride = stride;
    if (batched_view && (view->dtype != dtype || view->shape[0] != p.batch || view->shape[1] != rows ||
                         view->shape[2] != cols || view->strides[0] != stride || view->strides[1] != ld ||
                         view->strides[2] != 1))
        throw InvalidArgument(fmt::format("tileops::Gemm: argument '{}' must be a {} view of shape [{}, {}, {}] and strides "
                                          "[{}, {}, 1] as in the problem", name, dtype_name(dtype), p.batch, rows, cols,
                                          stride, ld));
    return span;
}

// Checks run()'s operands; returns the widest vector width the shape and the A, B pointers allow.
int bind(const GemmProblem& p, int shape_vec, Inputs inputs, Outputs outputs) {
    const size_t expected = 2 + (p.has_c ? 1 : 0) + (p.bias ? 1 : 0);
    const char* names = p.has_c && p.bias ? "A, B, C, bias" : p.has_c ? "A, B, C" : p.bias ? "A, B, bias" : "A, B";
    check_count("Gemm", "inputs", inputs.size(), expected, names);
    check_count("Gemm", "outputs", outputs.size(), 1, "D");
    const DType out = *p.out_dtype;
    const TensorArg& a = inputs[0];
    const TensorArg& b = inputs[1];
    const OutputArg& d = outputs[0];
    const RowsSpan a_span = check_gemm_operand(p, "A", a, p.dtype, p.m, p.k, p.lda, p.batch_stride_a);
    const RowsSpan b_span = check_gemm_operand(p, "B", b, p.dtype, b_rows(p), b_cols(p), p.ldb, p.batch_stride_b);
    const RowsSpan d_span = check_gemm_operand(p, "D", d, out, p.m, p.n, p.ldd, p.batch_stride_d);
    // Blocks write D where others still read their operands: any overlap with A, B or the bias
    // races (X = X W in place included), and with C all but exactly in place.
    if (p.has_c) {
        const TensorArg& c = inputs[2];
        if (outputs_conflict(d_span, check_gemm_operand(p, "C", c, out, p.m, p.n, p.ldc, p.batch_stride_c), true))
            throw InvalidArgument("tileops::Gemm: C and D overlap (only C == D with the same leading dimension and batch "
                                  "stride, in place, is allowed)");
    }
    if (outputs_conflict(d_span, a_span, false))
        throw InvalidArgument("tileops::Gemm: D overlaps A (the output cannot be written over an operand)");
    if (outputs_conflict(d_span, b_span, false))
        throw InvalidArgument("tileops::Gemm: D overlaps B (the output cannot be written over an operand)");
    const size_t in_bytes = dtype_size(p.dtype);
    if (p.bias) {
        const TensorArg& bias = inputs[p.has_c ? 3 : 2];
        if (outputs_conflict(d_span, check_operand("Gemm", "bias", bias.data(), bias.view(), p.dtype, 0, p.n, 1), false))
            throw InvalidArgument("tileops::Gemm: D overlaps the bias (the output cannot be written over an operand)");
    }
    int vec = widest_aligned_vector(shape_vec, a.data(), in_bytes);
    vec = widest_aligned_vector(vec, b.data(), in_bytes);
    // A 16-bit D may be stored with TMA by the sm_90 kernel (gemm_sm90_stores_with_tma).
    if (dtype_size(out) == 2) vec = widest_aligned_vector(vec, d.data(), 2);
    return vec;
}

// A 3-D (cols, rows, batch) tensor map of 16-bit elements, in boxes of 64 columns (128 bytes,
// swizzled 128B to match wgmma's shared-memory layout) x box_rows rows. Elements outside the
// matrix read as zeros (what ragged tiles need) and are not written by stores.
CUtensorMap tensor_map(const void* data, DType dtype, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                       int64_t stride, unsigned box_rows) {
    CUtensorMap map;
    const size_t element = dtype_size(dtype);
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows), static_cast<cuuint64_t>(batch)};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(ld) * element,
                                   static_cast<cuuint64_t>(batch > 1 ? stride : rows * ld) * element};
    const cuuint32_t box[3] = {64, box_rows, 1};
    const cuuint32_t element_strides[3] = {1, 1, 1};
    const CUtensorMapDataType type = dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    TILEOPS_CU_CHECK(cuda::driver().cuTensorMapEncodeTiled(
        &map, type, 3, const_cast<void*>(data), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    return map;
}

}  // namespace
}  // namespace detail

Gemm::Gemm(const GemmProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::GemmModel>(detail::normalized(problem)));
}

namespace detail {

int GemmModel::vector_width(Inputs inputs, Outputs outputs) const {
    return detail::bind(p_, shape_vec(), inputs, outputs);
}

void GemmModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    const GemmProblem& p = p_;
    GemmArgs args{inputs[0].data(),
                  inputs[1].data(),
                  p.has_c ? inputs[2].data() : nullptr,
                  p.bias ? inputs[p.has_c ? 3 : 2].data() : nullptr,
                  outputs[0].data(),
                  p.m, p.n, p.k, p.lda, p.ldb, p.ldc, p.ldd,
                  p.batch_stride_a, p.batch_stride_b, p.batch_stride_c, p.batch_stride_d,
                  p.batch, p.alpha, p.beta, 1, nullptr, nullptr, 0};
    const auto* tma = std::any_cast<detail::GemmTmaLaunch>(&launch.details);
    if (tma == nullptr) {  // the sm_80 and skinny kernels
        void* params[] = {&args};
        detail::launch(launch, params, stream, *this);
        return;
    }
    // The TMA kernel: A is loaded block_m rows at a time, B block_n rows (N x K) or 64 rows of K (K x N).
    const unsigned block_n = static_cast<unsigned>(tma->block_n);
    args.split_k = tma->split_k;
    if (tma->workspace.bytes() > 0) {
        args.split_counters = tma->workspace.counters(launch.workspace_data());
        args.partials = tma->workspace.partials(launch.workspace_data());
    }
    const unsigned b_rows = tma->paired ? block_n / 2 : block_n;  // pairs load half each
    args.a_box_rows = detail::gemm_a_box_rows(p.m, tma->block_m);
    alignas(64) CUtensorMap map_a =
        detail::tensor_map(args.a, p.dtype, p.m, p.k, p.lda, p.batch, p.batch_stride_a, static_cast<unsigned>(args.a_box_rows));
    alignas(64) CUtensorMap map_b =
        detail::nt(p) ? detail::tensor_map(args.b, p.dtype, p.n, p.k, p.ldb, p.batch, p.batch_stride_b, b_rows)
                      : detail::tensor_map(args.b, p.dtype, p.k, p.n, p.ldb, p.batch, p.batch_stride_b, 64);
    // A 16-bit D is stored from shared memory in boxes of 64 x 64; the kernel ignores map_d otherwise.
    alignas(64) CUtensorMap map_d = dtype_size(*p.out_dtype) == 2
                                        ? detail::tensor_map(args.d, *p.out_dtype, p.m, p.n, p.ldd, p.batch, p.batch_stride_d, 64)
                                        : map_a;
    void* params[] = {&map_a, &map_b, &map_d, &args};
    detail::launch(launch, params, stream, *this);
}

}  // namespace detail
}  // namespace tileops
