// Grouped FP8 GEMM: problem checks, tuning key and kernel choice (GemmFp8GroupedModel), operand
// checks and the launch. Kernel: gemm_fp8_sm90.cuh with the grouped schedule of
// kernel_templates/gemm/gemm_groups.cuh; configs: gemm_fp8_config.cpp.
#include "tileops/gemm_fp8_grouped.hpp"

#include <algorithm>
#include <any>
#include <cmath>

#include <fmt/format.h>

#include "core/gemm_groups.hpp"
#include "core/gemm_operands.hpp"
#include "core/launch.hpp"
#include "core/op_model.hpp"
#include "core/validation.hpp"
#include "gemm/gemm_args.cuh"  // kernel_templates/: the kernels' argument blocks, the schedules
#include "gemm_fp8/gemm_fp8_args.cuh"
#include "ops/gemm_fp8/gemm_fp8_config.hpp"
#include "tileops/error.hpp"

namespace tileops {
namespace detail {
namespace {

constexpr const char* kOp = "GemmFp8Grouped";

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
GemmGroups groups_of(const GemmFp8GroupedProblem& p) { return {p.groups, p.rows, p.group_layout == GemmGroupLayout::masked}; }

GemmFp8GroupedProblem normalized(GemmFp8GroupedProblem p) {
    const GemmGroups groups = GemmGroups::checked(kOp, p.groups, p.rows, p.n, p.k, p.group_layout);
    if (p.k % 16 != 0)
        throw InvalidArgument(fmt::format("tileops::{}: k = {} is not a multiple of 16 (rows of codes are loaded 16 bytes "
                                          "at a time; pad K with zero codes)", kOp, p.k));
    check_float_dtype(kOp, "out_dtype", p.out_dtype);
    if (p.scaling != GemmFp8Scaling::per_tensor && p.scaling != GemmFp8Scaling::per_row && p.scaling != GemmFp8Scaling::blocks)
        throw InvalidArgument(fmt::format("tileops::{}: scaling {} is not per_tensor, per_row or blocks", kOp,
                                          static_cast<int>(p.scaling)));
    if (p.epilogue != GemmEpilogue::none && p.epilogue != GemmEpilogue::gelu && p.epilogue != GemmEpilogue::silu)
        throw InvalidArgument(fmt::format("tileops::{}: epilogue {} is not none, gelu or silu", kOp, static_cast<int>(p.epilogue)));
    if (!std::isfinite(p.alpha)) throw InvalidArgument(fmt::format("tileops::{}: alpha must be finite, got {}", kOp, p.alpha));
    p.lda = gemm_leading_dimension(kOp, "lda", p.lda, p.k);
    p.ldb = gemm_leading_dimension(kOp, "ldb", p.ldb, p.k);
    p.ldd = gemm_leading_dimension(kOp, "ldd", p.ldd, p.n);
    p.group_stride_b = gemm_batch_stride(kOp, "group_stride_b", p.group_stride_b, p.groups, p.n, p.k, p.ldb, false);
    check_gemm_offsets(kOp, std::max(groups.flat_rows(), std::max(p.n, p.k)), {{"lda", p.lda}, {"ldb", p.ldb}, {"ldd", p.ldd}});
    check_gemm_offsets(kOp, p.groups, {{"group_stride_b", p.group_stride_b}});
    // TMA reads A and B: every row (and group of B) must start 16 bytes after the one before.
    for (auto [name, value] : {std::pair{"lda", p.lda}, {"ldb", p.ldb}, {"group_stride_b", p.groups > 1 ? p.group_stride_b : 0}})
        if (value % 16 != 0)
            throw InvalidArgument(fmt::format("tileops::{}: {} = {} is not a multiple of 16 (rows of codes must start on "
                                              "16 bytes)", kOp, name, value));
    return p;
}

const char* activation_index(GemmEpilogue e) { return e == GemmEpilogue::gelu ? "1" : e == GemmEpilogue::silu ? "2" : "0"; }

// The scale vectors' lengths, A's over the flat matrix and B's over every group (see the header).
std::pair<int64_t, int64_t> scale_counts(const GemmFp8GroupedProblem& p, int64_t flat_rows) {
    switch (p.scaling) {
        case GemmFp8Scaling::per_row: return {flat_rows, p.groups * p.n};
        case GemmFp8Scaling::blocks: return {ceil_div(p.k, 128) * flat_rows, p.groups * ceil_div(p.n, 128) * ceil_div(p.k, 128)};
        default: return {1, p.groups};
    }
}

constexpr int kAlignedD = 16;  // D stored with TMA (GemmDStore)

struct GemmFp8GroupedTile {
    int block_m, block_n;
    bool tma_store;
};

}  // namespace

class GemmFp8GroupedModel final : public OpModel {
public:
    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;
    // Configs are chosen for a batch of groups of the typical rows (GemmGroups::typical_rows).
    explicit GemmFp8GroupedModel(const GemmFp8GroupedProblem& p)
        : p_(p),
          groups_(groups_of(p)),
          shape_{p.groups, groups_.typical_rows(), p.n, p.k, p.scaling == GemmFp8Scaling::blocks, dtype_size(p.out_dtype)},
          d_store_(shape_.out_bytes, {p.n, p.ldd}, kAlignedD) {}

    std::string op_name() const override { return "gemm_fp8_grouped"; }
    std::vector<long long> shape() const override { return {p_.groups, p_.rows, p_.n, p_.k}; }
    std::string dtype_key() const override { return fmt::format("fp8_e4m3->{}", dtype_name(p_.out_dtype)); }
    // "block,masked,silu": the scaling, the layout, the activation.
    std::string flags() const override {
        std::string text = gemm_fp8_scaling_name(p_.scaling);
        if (groups_.masked) text += ",masked";
        if (p_.epilogue != GemmEpilogue::none) text += std::string(",") + gemm_epilogue_name(p_.epilogue);
        return text;
    }

    std::optional<std::string> unsupported_reason(const DeviceInfo& device) const override {
        return gemm_fp8_unsupported_reason(device);
    }
    Config heuristic(const DeviceInfo& device) const override { return gemm_fp8_heuristic(shape_, device).to_config(); }
    std::vector<Config> search_space(const DeviceInfo& device) const override {
        std::vector<Config> space;
        for (const GemmFp8Config& c : gemm_fp8_search_space(shape_, device))
            if (!invalid_reason(c.to_config(), device)) space.push_back(c.to_config());
        return space;
    }
    std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const override {
        GemmFp8Config c;
        try {
            c = GemmFp8Config::from(config);
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        if (auto reason = gemm_fp8_invalid_reason(c, shape_, device)) return reason;
        if (shared_bytes(c) > static_cast<unsigned>(device.max_shared_memory_per_block_optin))
            return fmt::format("needs {} bytes of shared memory with the groups' table, the device allows {}", shared_bytes(c),
                               device.max_shared_memory_per_block_optin);
        if (groups_.max_units(c.block_m, p_.n, c.block_n) > 0x7fffffffLL) return "too many tiles for one launch";
        return std::nullopt;
    }
    std::vector<int> vector_widths(const Config&) const override { return d_store_.widths(); }

    LaunchPlan plan(const Config& config, int width, const DeviceInfo& device) const override {
        const GemmFp8Config c = GemmFp8Config::from(config);
        const bool tma_store = width == kAlignedD && gemm_fp8_stores_with_tma(shape_, c);
        LaunchPlan plan;
        plan.template_file = "gemm_fp8/gemm_fp8_sm90.cuh";
        plan.name_expression = gemm_fp8_kernel_name(c, device_type_name(p_.out_dtype), static_cast<int>(p_.scaling),
                                                    fmt::format("false, false, {}", activation_index(p_.epilogue)),
                                                    tma_store, groups_.schedule());
        plan.shared_bytes = shared_bytes(c);
        plan.block[0] = static_cast<unsigned>(c.threads());
        plan.grid[0] = static_cast<unsigned>(std::min<int64_t>(groups_.max_units(c.block_m, p_.n, c.block_n), device.sm_count));
        plan.persistent = true;
        plan.details = GemmFp8GroupedTile{c.block_m, c.block_n, tma_store};
        return plan;
    }

    std::vector<OperandSpec> operands() const override {
        const int64_t rows = groups_.flat_rows();
        const int64_t b_extent = (p_.groups - 1) * p_.group_stride_b + gemm_matrix_extent(p_.n, p_.k, p_.ldb);
        const auto [scales_a, scales_b] = scale_counts(p_, rows);
        return {{"A", DType::fp8_e4m3, rows, p_.k, p_.lda, false},
                {"B", DType::fp8_e4m3, (b_extent - p_.k + p_.ldb - 1) / p_.ldb + 1, p_.k, p_.ldb, false},
                {"scales_a", DType::fp32, 0, scales_a, scales_a, false},
                {"scales_b", DType::fp32, 0, scales_b, scales_b, false},
                groups_.rows_operand(),
                {"D", p_.out_dtype, rows, p_.n, p_.ldd, true}};
    }

    const GemmFp8GroupedProblem& problem() const noexcept { return p_; }
    const GemmGroups& groups() const noexcept { return groups_; }

private:
    unsigned shared_bytes(const GemmFp8Config& c) const {
        return c.shared_bytes(shape_) + gemm_groups_table_bytes(static_cast<int>(p_.groups));
    }

    GemmFp8GroupedProblem p_;
    GemmGroups groups_;
    GemmFp8Shape shape_;
    GemmDStore d_store_;
};

namespace {

void bind(const GemmFp8GroupedProblem& p, const GemmGroups& g, Inputs inputs, Outputs outputs) {
    check_count(kOp, "inputs", inputs.size(), 5, "A, B, scales_a, scales_b, group_rows");
    check_count(kOp, "outputs", outputs.size(), 1, "D");
    const RowsSpan a = g.check_rows_operand(kOp, "A", inputs[0], DType::fp8_e4m3, p.k, p.lda);
    const RowsSpan b = check_gemm_operand(kOp, p.groups, "B", inputs[1], DType::fp8_e4m3, p.n, p.k, p.ldb, p.group_stride_b);
    check_tma_operands_aligned(kOp, inputs[0].data(), inputs[1].data());
    const auto [count_a, count_b] = scale_counts(p, g.flat_rows());
    const RowsSpan sa = check_operand(kOp, "scales_a", inputs[2].data(), inputs[2].view(), DType::fp32, 0, count_a, 1);
    const RowsSpan sb = check_operand(kOp, "scales_b", inputs[3].data(), inputs[3].view(), DType::fp32, 0, count_b, 1);
    const RowsSpan rows = g.check_group_rows(kOp, inputs[4]);
    const RowsSpan d = g.check_rows_operand(kOp, "D", outputs[0], p.out_dtype, p.n, p.ldd);
    for (const RowsSpan& other : {a, b, sa, sb, rows}) check_output_overlap(kOp, d, other, false);
}

}  // namespace
}  // namespace detail

GemmFp8Grouped::GemmFp8Grouped(const GemmFp8GroupedProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::GemmFp8GroupedModel>(detail::normalized(problem)));
}

namespace detail {

int GemmFp8GroupedModel::vector_width(Inputs inputs, Outputs outputs) const {
    bind(p_, groups_, inputs, outputs);
    return d_store_.width(outputs[0].data());
}

void GemmFp8GroupedModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    const GemmFp8GroupedProblem& p = p_;
    const auto& tile = std::any_cast<const GemmFp8GroupedTile&>(launch.details);
    GemmArgs args = groups_.kernel_args({inputs[0].data(), inputs[1].data(), outputs[0].data(), inputs[4].data(), p.n, p.k,
                                         p.lda, p.ldb, p.ldd, p.group_stride_b, p.alpha},
                                        tile.block_m);
    GemmFp8Scales scales{static_cast<const float*>(inputs[2].data()), static_cast<const float*>(inputs[3].data())};
    alignas(64) CUtensorMap map_a = groups_.a_map(args, DType::fp8_e4m3);
    alignas(64) CUtensorMap map_b = gemm_tensor_map(args.b, DType::fp8_e4m3, p.n, p.k, p.ldb, p.groups, p.group_stride_b,
                                                    static_cast<unsigned>(tile.block_n));
    // A TMA-stored D in boxes of 64 x 64; the kernel ignores map_d otherwise.
    alignas(64) CUtensorMap map_d = tile.tma_store ? groups_.d_map(args, p.out_dtype) : map_a;
    void* params[] = {&map_a, &map_b, &map_d, &args, &scales};
    detail::launch(launch, params, stream, *this);
}

}  // namespace detail
}  // namespace tileops
