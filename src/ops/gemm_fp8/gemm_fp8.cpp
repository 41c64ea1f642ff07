// FP8 GEMM: problem checks, tuning key and kernel choice (GemmFp8Model), operand checks and the
// launch. Kernel: kernel_templates/gemm_fp8/gemm_fp8_sm90.cuh; configs: gemm_fp8_config.cpp.
#include "tileops/gemm_fp8.hpp"

#include <any>
#include <cmath>

#include <fmt/format.h>

#include "core/gemm_operands.hpp"
#include "core/launch.hpp"
#include "core/op_model.hpp"
#include "core/validation.hpp"
#include "gemm/gemm_args.cuh"  // kernel_templates/: the kernels' argument blocks
#include "gemm_fp8/gemm_fp8_args.cuh"
#include "ops/gemm_fp8/gemm_fp8_config.hpp"
#include "tileops/error.hpp"

namespace tileops {

const char* gemm_fp8_scaling_name(GemmFp8Scaling scaling) noexcept {
    switch (scaling) {
        case GemmFp8Scaling::per_tensor: return "tensor";
        case GemmFp8Scaling::per_row: return "row";
        case GemmFp8Scaling::blocks: return "block";
    }
    return "tensor";
}

namespace detail {
namespace {

constexpr const char* kOp = "GemmFp8";
constexpr int64_t kMaxBatch = 65535;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// LaunchPlan::details of a launch: the tile its TMA boxes are cut to (A's to the rows M has), and
// whether it stores D with TMA.
struct GemmFp8Tile {
    int block_m, block_n;
    bool tma_store;
};

// The launch widths (OpModel::vector_widths): D's rows aligned for TMA stores, or not.
constexpr int kAlignedD = 16;  // its ragged width: D stored from registers (GemmDStore)

GemmFp8Problem normalized(GemmFp8Problem p) {
    const int64_t dims[] = {p.m, p.n, p.k};
    const char* names[] = {"m", "n", "k"};
    for (int i = 0; i < 3; ++i) {
        if (dims[i] < 1) throw InvalidArgument(fmt::format("tileops::GemmFp8: {} must be >= 1, got {}", names[i], dims[i]));
        if (dims[i] > (int64_t{1} << 31) - 1)
            throw InvalidArgument(fmt::format("tileops::GemmFp8: {} = {} is larger than supported (2^31 - 1)", names[i], dims[i]));
    }
    if (p.k % 16 != 0)
        throw InvalidArgument(fmt::format("tileops::GemmFp8: k = {} is not a multiple of 16 (rows of codes are loaded "
                                          "16 bytes at a time; pad K with zero codes)", p.k));
    check_float_dtype(kOp, "out_dtype", p.out_dtype);
    if (p.scaling != GemmFp8Scaling::per_tensor && p.scaling != GemmFp8Scaling::per_row &&
        p.scaling != GemmFp8Scaling::blocks)
        throw InvalidArgument(fmt::format("tileops::GemmFp8: scaling {} is not per_tensor, per_row or blocks",
                                          static_cast<int>(p.scaling)));
    if (p.epilogue != GemmEpilogue::none && p.epilogue != GemmEpilogue::gelu && p.epilogue != GemmEpilogue::silu)
        throw InvalidArgument(fmt::format("tileops::GemmFp8: epilogue {} is not none, gelu or silu", static_cast<int>(p.epilogue)));
    if (!std::isfinite(p.alpha) || !std::isfinite(p.beta))
        throw InvalidArgument(fmt::format("tileops::GemmFp8: alpha and beta must be finite, got {} and {}", p.alpha, p.beta));
    if (p.beta != 0.0f && !p.has_c)
        throw InvalidArgument(fmt::format("tileops::GemmFp8: beta = {} needs C: set has_c (and pass C to run())", p.beta));
    if (p.beta == 0.0f && p.has_c)
        throw InvalidArgument("tileops::GemmFp8: has_c with beta = 0 would still read C (NaN or Inf there reaches D): "
                              "leave has_c unset when beta is 0");
    if (p.batch < 1 || p.batch > kMaxBatch)
        throw InvalidArgument(fmt::format("tileops::GemmFp8: batch = {} is not in [1, {}]", p.batch, kMaxBatch));
    if (p.batch > 1 && p.scaling != GemmFp8Scaling::per_tensor)
        throw InvalidArgument(fmt::format("tileops::GemmFp8: batch = {} needs per_tensor scaling (one pair of scales for "
                                          "every entry), got {}", p.batch, gemm_fp8_scaling_name(p.scaling)));
    p.lda = gemm_leading_dimension(kOp, "lda", p.lda, p.k);
    p.ldb = gemm_leading_dimension(kOp, "ldb", p.ldb, p.k);
    p.ldc = gemm_leading_dimension(kOp, "ldc", p.ldc, p.n);
    p.ldd = gemm_leading_dimension(kOp, "ldd", p.ldd, p.n);
    check_gemm_offsets(kOp, std::max(p.m, std::max(p.n, p.k)), {{"lda", p.lda}, {"ldb", p.ldb}, {"ldc", p.ldc}, {"ldd", p.ldd}});
    p.batch_stride_a = gemm_batch_stride(kOp, "batch_stride_a", p.batch_stride_a, p.batch, p.m, p.k, p.lda, false);
    p.batch_stride_b = gemm_batch_stride(kOp, "batch_stride_b", p.batch_stride_b, p.batch, p.n, p.k, p.ldb, false);
    p.batch_stride_c = gemm_batch_stride(kOp, "batch_stride_c", p.batch_stride_c, p.batch, p.m, p.n, p.ldc, false);
    p.batch_stride_d = gemm_batch_stride(kOp, "batch_stride_d", p.batch_stride_d, p.batch, p.m, p.n, p.ldd, true);
    check_gemm_offsets(kOp, p.batch, {{"batch_stride_a", p.batch_stride_a}, {"batch_stride_b", p.batch_stride_b},
                                      {"batch_stride_c", p.batch_stride_c}, {"batch_stride_d", p.batch_stride_d}});
    // TMA reads A and B: every row (and batch entry) must start 16 bytes after the one before.
    for (auto [name, value] : {std::pair{"lda", p.lda}, {"ldb", p.ldb}, {"batch_stride_a", p.batch > 1 ? p.batch_stride_a : 0},
                               {"batch_stride_b", p.batch > 1 ? p.batch_stride_b : 0}})
        if (value % 16 != 0)
            throw InvalidArgument(fmt::format("tileops::GemmFp8: {} = {} is not a multiple of 16 (rows of codes must start "
                                              "on 16 bytes)", name, value));
    return p;
}

const char* activation_index(GemmEpilogue e) { return e == GemmEpilogue::gelu ? "1" : e == GemmEpilogue::silu ? "2" : "0"; }

// The scale vectors' lengths: A's and B's (GemmFp8Scaling).
std::pair<int64_t, int64_t> scale_counts(const GemmFp8Problem& p) {
    switch (p.scaling) {
        case GemmFp8Scaling::per_row: return {p.m, p.n};
        case GemmFp8Scaling::blocks: return {ceil_div(p.k, 128) * p.m, ceil_div(p.n, 128) * ceil_div(p.k, 128)};
        default: return {1, 1};
    }
}

}  // namespace

class GemmFp8Model final : public OpModel {
public:
    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;
    const GemmFp8Problem& problem() const noexcept { return p_; }
    explicit GemmFp8Model(const GemmFp8Problem& p)
        : p_(p),
          shape_{p.batch, p.m, p.n, p.k, p.scaling == GemmFp8Scaling::blocks, dtype_size(p.out_dtype)},
          // A TMA store of a 16-bit D needs its rows to start and end on 16 bytes.
          d_store_(shape_.out_bytes, {p.n, p.ldd, p.batch > 1 ? p.batch_stride_d : 0}, kAlignedD) {}

    std::string op_name() const override { return "gemm_fp8"; }
    std::vector<long long> shape() const override {
        if (p_.batch > 1) return {p_.batch, p_.m, p_.n, p_.k};
        return {p_.m, p_.n, p_.k};
    }
    std::string dtype_key() const override { return fmt::format("fp8_e4m3->{}", dtype_name(p_.out_dtype)); }
    // The options that change the kernel, in a fixed order: "row,beta,bias,gelu".
    std::string flags() const override {
        std::string text = gemm_fp8_scaling_name(p_.scaling);
        if (p_.has_c) text += ",beta";
        if (p_.bias) text += ",bias";
        if (p_.epilogue != GemmEpilogue::none) text += std::string(",") + gemm_epilogue_name(p_.epilogue);
        return text;
    }

    std::optional<std::string> unsupported_reason(const DeviceInfo& device) const override {
        return gemm_fp8_unsupported_reason(device);
    }
    Config heuristic(const DeviceInfo& device) const override { return gemm_fp8_heuristic(shape_, device).to_config(); }
    std::vector<Config> search_space(const DeviceInfo& device) const override {
        std::vector<Config> space;
        for (const GemmFp8Config& c : gemm_fp8_search_space(shape_, device)) space.push_back(c.to_config());
        return space;
    }
    std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const override {
        GemmFp8Config c;
        try {
            c = GemmFp8Config::from(config);
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        return gemm_fp8_invalid_reason(c, shape_, device);
    }
    // A and B are read with TMA from 16-byte aligned rows (run() refuses others), so the widths
    // say only how D is stored: kAlignedD (with TMA, where 16-bit in tiles of 64 columns) or its
    // ragged width (from registers, any alignment).
    std::vector<int> vector_widths(const Config&) const override { return d_store_.widths(); }

    LaunchPlan plan(const Config& config, int width, const DeviceInfo& device) const override {
        const GemmFp8Config c = GemmFp8Config::from(config);
        const bool tma_store = width == kAlignedD && gemm_fp8_stores_with_tma(shape_, c);
        LaunchPlan plan;
        plan.template_file = "gemm_fp8/gemm_fp8_sm90.cuh";
        plan.name_expression = gemm_fp8_kernel_name(
            c, device_type_name(p_.out_dtype), static_cast<int>(p_.scaling),
            fmt::format("{}, {}, {}", p_.has_c ? "true" : "false", p_.bias ? "true" : "false", activation_index(p_.epilogue)),
            tma_store, 0);
        plan.shared_bytes = c.shared_bytes(shape_);
        plan.block[0] = static_cast<unsigned>(c.threads());
        // Persistent: at most one block per SM, each walking tiles.
        plan.grid[0] = static_cast<unsigned>(std::min<int64_t>(gemm_fp8_tiles(c, shape_), device.sm_count));
        plan.persistent = true;
        plan.details = GemmFp8Tile{c.block_m, c.block_n, tma_store};  // the TMA boxes are cut to the tile
        return plan;
    }

    std::vector<OperandSpec> operands() const override {
        auto spec = [&](const char* name, DType dtype, int64_t rows, int64_t cols, int64_t ld, int64_t stride, bool out) {
            const int64_t extent = (p_.batch - 1) * stride + gemm_matrix_extent(rows, cols, ld);
            return OperandSpec{name, dtype, (extent - cols + ld - 1) / ld + 1, cols, ld, out};
        };
        const auto [scales_a, scales_b] = scale_counts(p_);
        std::vector<OperandSpec> list{spec("A", DType::fp8_e4m3, p_.m, p_.k, p_.lda, p_.batch_stride_a, false),
                                      spec("B", DType::fp8_e4m3, p_.n, p_.k, p_.ldb, p_.batch_stride_b, false),
                                      {"scales_a", DType::fp32, 0, scales_a, scales_a, false},
                                      {"scales_b", DType::fp32, 0, scales_b, scales_b, false}};
        if (p_.has_c) list.push_back(spec("C", p_.out_dtype, p_.m, p_.n, p_.ldc, p_.batch_stride_c, false));
        if (p_.bias) list.push_back({"bias", p_.out_dtype, 0, p_.n, p_.n, false});
        list.push_back(spec("D", p_.out_dtype, p_.m, p_.n, p_.ldd, p_.batch_stride_d, true));
        return list;
    }

private:
    GemmFp8Problem p_;
    GemmFp8Shape shape_;
    GemmDStore d_store_;
};

namespace {

// Checks run()'s operands (throws InvalidArgument naming the one that is wrong).
void bind(const GemmFp8Problem& p, Inputs inputs, Outputs outputs) {
    const size_t expected = 4 + (p.has_c ? 1 : 0) + (p.bias ? 1 : 0);
    const char* names = p.has_c && p.bias ? "A, B, scales_a, scales_b, C, bias"
                        : p.has_c         ? "A, B, scales_a, scales_b, C"
                        : p.bias          ? "A, B, scales_a, scales_b, bias"
                                          : "A, B, scales_a, scales_b";
    check_count(kOp, "inputs", inputs.size(), expected, names);
    check_count(kOp, "outputs", outputs.size(), 1, "D");
    const RowsSpan a = check_gemm_operand(kOp, p.batch, "A", inputs[0], DType::fp8_e4m3, p.m, p.k, p.lda, p.batch_stride_a);
    const RowsSpan b = check_gemm_operand(kOp, p.batch, "B", inputs[1], DType::fp8_e4m3, p.n, p.k, p.ldb, p.batch_stride_b);
    check_tma_operands_aligned(kOp, inputs[0].data(), inputs[1].data());
    const auto [count_a, count_b] = scale_counts(p);
    const RowsSpan sa = check_operand(kOp, "scales_a", inputs[2].data(), inputs[2].view(), DType::fp32, 0, count_a, 1);
    const RowsSpan sb = check_operand(kOp, "scales_b", inputs[3].data(), inputs[3].view(), DType::fp32, 0, count_b, 1);
    const RowsSpan d = check_gemm_operand(kOp, p.batch, "D", outputs[0], p.out_dtype, p.m, p.n, p.ldd, p.batch_stride_d);
    if (p.has_c &&
        outputs_conflict(d, check_gemm_operand(kOp, p.batch, "C", inputs[4], p.out_dtype, p.m, p.n, p.ldc, p.batch_stride_c), true))
        throw InvalidArgument("tileops::GemmFp8: C and D overlap (only C == D with the same leading dimension and batch "
                              "stride, in place, is allowed)");
    for (const RowsSpan& other : {a, b, sa, sb})
        check_output_overlap(kOp, d, other, false);
    if (p.bias)
        check_output_overlap(kOp, d, check_operand(kOp, "bias", inputs[p.has_c ? 5 : 4].data(), inputs[p.has_c ? 5 : 4].view(),
                                                   p.out_dtype, 0, p.n, 1), false);
}

}  // namespace
}  // namespace detail

GemmFp8::GemmFp8(const GemmFp8Problem& problem) {
    problem_ = adopt(std::make_shared<const detail::GemmFp8Model>(detail::normalized(problem)));
}

namespace detail {

int GemmFp8Model::vector_width(Inputs inputs, Outputs outputs) const {
    bind(p_, inputs, outputs);
    return d_store_.width(outputs[0].data());
}

void GemmFp8Model::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    const GemmFp8Problem& p = p_;
    const auto& tile = std::any_cast<const GemmFp8Tile&>(launch.details);
    GemmArgs args{inputs[0].data(),
                  inputs[1].data(),
                  p.has_c ? inputs[4].data() : nullptr,
                  p.bias ? inputs[p.has_c ? 5 : 4].data() : nullptr,
                  outputs[0].data(),
                  p.m, p.n, p.k, p.lda, p.ldb, p.ldc, p.ldd,
                  p.batch_stride_a, p.batch_stride_b, p.batch_stride_c, p.batch_stride_d,
                  p.batch, p.alpha, p.beta, 1, nullptr, nullptr, gemm_a_box_rows(p.m, tile.block_m), {}, nullptr, 0, 0};
    GemmFp8Scales scales{static_cast<const float*>(inputs[2].data()), static_cast<const float*>(inputs[3].data())};
    alignas(64) CUtensorMap map_a = gemm_tensor_map(args.a, DType::fp8_e4m3, p.m, p.k, p.lda, p.batch, p.batch_stride_a,
                                                    static_cast<unsigned>(args.a_box_rows));
    alignas(64) CUtensorMap map_b = gemm_tensor_map(args.b, DType::fp8_e4m3, p.n, p.k, p.ldb, p.batch, p.batch_stride_b,
                                                    static_cast<unsigned>(tile.block_n));
    // A TMA-stored D in boxes of 64 x 64; the kernel ignores map_d otherwise.
    alignas(64) CUtensorMap map_d = tile.tma_store ? gemm_tensor_map(args.d, p.out_dtype, p.m, p.n, p.ldd, p.batch,
                                                                     p.batch_stride_d, 64)
                                                   : map_a;
    void* params[] = {&map_a, &map_b, &map_d, &args, &scales};
    detail::launch(launch, params, stream, *this);
}

}  // namespace detail
}  // namespace tileops
