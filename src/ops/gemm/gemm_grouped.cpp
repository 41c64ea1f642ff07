// Grouped GEMM: problem checks, tuning key and kernel choice (GemmGroupedModel), operand checks and
// the launch. Kernels: the 16-bit GEMM's (gemm_sm90.cuh, gemm_sm80.cuh) with the grouped schedule
// of kernel_templates/gemm/gemm_groups.cuh; configs: gemm_config.cpp, restricted here.
#include "tileops/gemm_grouped.hpp"

#include <algorithm>
#include <any>
#include <cmath>

#include <fmt/format.h>

#include "core/gemm_groups.hpp"
#include "core/gemm_operands.hpp"
#include "core/launch.hpp"
#include "core/op_model.hpp"
#include "core/validation.hpp"
#include "gemm/gemm_args.cuh"  // kernel_templates/: the kernels' argument block, the schedules
#include "ops/gemm/gemm_config.hpp"
#include "tileops/error.hpp"

namespace tileops {

const char* gemm_group_layout_name(GemmGroupLayout layout) noexcept {
    return layout == GemmGroupLayout::masked ? "masked" : "contiguous";
}

namespace detail {
namespace {

constexpr const char* kOp = "GemmGrouped";

bool nt(const GemmGroupedProblem& p) { return p.layout == GemmLayout::nt; }
int64_t b_rows(const GemmGroupedProblem& p) { return nt(p) ? p.n : p.k; }
int64_t b_cols(const GemmGroupedProblem& p) { return nt(p) ? p.k : p.n; }
GemmGroups groups_of(const GemmGroupedProblem& p) { return {p.groups, p.rows, p.group_layout == GemmGroupLayout::masked}; }

GemmGroupedProblem normalized(GemmGroupedProblem p) {
    const GemmGroups groups = GemmGroups::checked(kOp, p.groups, p.rows, p.n, p.k, p.group_layout);
    if (p.dtype != DType::fp16 && p.dtype != DType::bf16)
        throw Unsupported(fmt::format("tileops::GemmGrouped: dtype {} is not supported for A and B (fp16 or bf16)",
                                      dtype_name(p.dtype)));
    if (!p.out_dtype) p.out_dtype = p.dtype;
    check_float_dtype(kOp, "out_dtype", *p.out_dtype);
    if (p.layout != GemmLayout::nn && p.layout != GemmLayout::nt)
        throw InvalidArgument(fmt::format("tileops::GemmGrouped: layout {} is not nn or nt", static_cast<int>(p.layout)));
    if (p.epilogue != GemmEpilogue::none && p.epilogue != GemmEpilogue::gelu && p.epilogue != GemmEpilogue::silu)
        throw InvalidArgument(fmt::format("tileops::GemmGrouped: epilogue {} is not none, gelu or silu", static_cast<int>(p.epilogue)));
    if (!std::isfinite(p.alpha)) throw InvalidArgument(fmt::format("tileops::GemmGrouped: alpha must be finite, got {}", p.alpha));
    p.lda = gemm_leading_dimension(kOp, "lda", p.lda, p.k);
    p.ldb = gemm_leading_dimension(kOp, "ldb", p.ldb, b_cols(p));
    p.ldd = gemm_leading_dimension(kOp, "ldd", p.ldd, p.n);
    p.group_stride_b = gemm_batch_stride(kOp, "group_stride_b", p.group_stride_b, p.groups, b_rows(p), b_cols(p), p.ldb, false);
    check_gemm_offsets(kOp, std::max(groups.flat_rows(), std::max(p.n, p.k)), {{"lda", p.lda}, {"ldb", p.ldb}, {"ldd", p.ldd}});
    check_gemm_offsets(kOp, p.groups, {{"group_stride_b", p.group_stride_b}});
    // TMA reads A and B: every row (and group of B) must start 16 bytes after the one before.
    for (auto [name, value] : {std::pair{"lda", p.lda}, {"ldb", p.ldb}, {"group_stride_b", p.groups > 1 ? p.group_stride_b : 0}})
        if (value % 8 != 0)
            throw InvalidArgument(fmt::format("tileops::GemmGrouped: {} = {} is not a multiple of 8 elements (rows are read "
                                              "with TMA, 16 bytes aligned; pad K)", name, value));
    return p;
}

const char* activation_index(GemmEpilogue e) { return e == GemmEpilogue::gelu ? "1" : e == GemmEpilogue::silu ? "2" : "0"; }

// The launch width of a D stored with TMA (GemmDStore: its ragged width stores from registers).
constexpr int kAlignedD = 8;

// LaunchPlan::details: the tile the tensor maps' boxes are cut to.
struct GemmGroupedTile {
    bool tma = false;
    int block_m = 0, block_n = 0;
    bool paired = false;
};

}  // namespace

class GemmGroupedModel final : public OpModel {
public:
    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;
    // The schedule's configs see the problem as a batch of groups of equal rows: the rows a group
    // has on average (contiguous) or room for (masked).
    explicit GemmGroupedModel(const GemmGroupedProblem& p)
        : p_(p),
          groups_(groups_of(p)),
          shape_{p.groups, groups_.typical_rows(), p.n, p.k, dtype_size(p.dtype), nt(p), dtype_size(*p.out_dtype)},
          d_store_(shape_.out_bytes, {p.n, p.ldd}, kAlignedD) {}

    std::string op_name() const override { return "gemm_grouped"; }
    std::vector<long long> shape() const override { return {p_.groups, p_.rows, p_.n, p_.k}; }
    std::string dtype_key() const override {
        if (p_.dtype == *p_.out_dtype) return dtype_name(p_.dtype);
        return fmt::format("{}->{}", dtype_name(p_.dtype), dtype_name(*p_.out_dtype));
    }
    // "masked,nt,silu": the layouts and the activation, in a fixed order.
    std::string flags() const override {
        std::string text;
        auto add = [&](const char* flag) { text += (text.empty() ? "" : ",") + std::string(flag); };
        if (groups_.masked) add("masked");
        if (nt(p_)) add("nt");
        if (p_.epilogue != GemmEpilogue::none) add(gemm_epilogue_name(p_.epilogue));
        return text;
    }

    // The batched GEMM's choice for the average group, without what the grouped schedule lacks:
    // the skinny and gemv kernels and split K (all need the tiles' count on the host).
    Config heuristic(const DeviceInfo& device) const override {
        if (auto decode = decode_heuristic(device)) return decode->to_config();
        GemmConfig c = gemm_heuristic(shape_, device);
        if (gemm_reads_in_place(c.kernel)) c = gemm_sm80_heuristic(shape_, device);
        c.split_k = 1;
        // The widths the grouped TMA kernel leaves out (see invalid_reason): the next narrower.
        if (c.kernel == kGemmSm90 && grouped_spills(c)) c.cluster = 1;
        if (c.kernel == kGemmSm90) {
            if (auto few_hundred = few_hundred_rows_heuristic(device)) c = *few_hundred;
        }
        if (invalid_reason(c.to_config(), device)) c = gemm_sm80_heuristic(shape_, device);
        return c.to_config();
    }
    std::vector<Config> search_space(const DeviceInfo& device) const override {
        std::vector<Config> space;
        for (const GemmConfig& c : gemm_search_space(shape_, device)) {
            if (device.sm() == 90 && c.kernel == kGemmSm80) continue;  // only slower there (see GemmModel)
            if (!invalid_reason(c.to_config(), device)) space.push_back(c.to_config());
        }
        return space;
    }
    std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const override {
        GemmConfig c;
        try {
            c = GemmConfig::from(config);
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        if (gemm_reads_in_place(c.kernel))
            return fmt::format("kernel {} ({}) does not run groups", c.kernel, c.kernel == kGemmSkinny ? "skinny" : "gemv");
        if (c.split_k != 1) return fmt::format("split_k = {}: groups are not split along K", c.split_k);
        if (c.vec != 8) return fmt::format("vec = {}: A and B rows are 16-byte aligned (vec 8)", c.vec);
        if (c.kernel == kGemmSm90 && grouped_spills(c))
            return fmt::format("block_n = {} with cluster = 2 spills registers under the group schedule", c.block_n);
        if (auto reason = gemm_invalid_reason(c, shape_, device)) return reason;
        if (shared_bytes(c) > static_cast<unsigned>(device.max_shared_memory_per_block_optin))
            return fmt::format("needs {} bytes of shared memory with the groups' table, the device allows {}",
                               shared_bytes(c), device.max_shared_memory_per_block_optin);
        if (max_units(c) > 0x7fffffffLL) return "too many tiles for one launch";
        return std::nullopt;
    }
    std::vector<int> vector_widths(const Config&) const override { return d_store_.widths(); }

    LaunchPlan plan(const Config& config, int width, const DeviceInfo& device) const override {
        const GemmConfig c = GemmConfig::from(config);
        const int groups = groups_.schedule();
        const std::string types = fmt::format("{}, {}, {}", device_type_name(p_.dtype), device_type_name(*p_.out_dtype),
                                              nt(p_) ? "true" : "false");
        const std::string epilogue = fmt::format("false, false, {}", activation_index(p_.epilogue));
        LaunchPlan plan;
        plan.shared_bytes = shared_bytes(c);
        plan.block[0] = static_cast<unsigned>(c.threads());
        const int64_t units = max_units(c);
        if (c.kernel == kGemmSm90) {
            const bool tma_store = width == kAlignedD && gemm_sm90_stores_with_tma(shape_, c);
            plan.template_file = "gemm/gemm_sm90.cuh";
            plan.name_expression = gemm_kernel_name(c, types, epilogue, tma_store, groups);
            plan.grid[0] = static_cast<unsigned>(std::min<int64_t>(units, device.sm_count / c.cluster) * c.cluster);
            plan.cluster = static_cast<unsigned>(c.cluster);
            plan.persistent = true;
            plan.details = GemmGroupedTile{true, c.block_m, c.block_n, c.cluster == 2};
        } else {
            // A block per tile the groups could have; those past the real tiles leave at once.
            plan.template_file = "gemm/gemm_sm80.cuh";
            plan.name_expression = gemm_kernel_name(c, types, epilogue, false, groups);
            plan.grid[0] = static_cast<unsigned>(units);
            plan.details = GemmGroupedTile{false, c.block_m, c.block_n, false};
        }
        return plan;
    }

    std::vector<OperandSpec> operands() const override {
        const int64_t rows = groups_.flat_rows();
        const int64_t b_extent = (p_.groups - 1) * p_.group_stride_b + gemm_matrix_extent(b_rows(p_), b_cols(p_), p_.ldb);
        return {{"A", p_.dtype, rows, p_.k, p_.lda, false},
                {"B", p_.dtype, (b_extent - b_cols(p_) + p_.ldb - 1) / p_.ldb + 1, b_cols(p_), p_.ldb, false},
                groups_.rows_operand(),
                {"D", *p_.out_dtype, rows, p_.n, p_.ldd, true}};
    }

    const GemmGroupedProblem& problem() const noexcept { return p_; }
    const GemmGroups& groups() const noexcept { return groups_; }

private:
    // A decode step (masked, at most 64 rows a group) only streams the active groups' B, and a
    // step of one token activates as few groups as its top-k (8 or fewer in the models of
    // bench_gemm_grouped.py): the widest 64-row tiles whose columns, over 8 groups, still give
    // every SM one, with the deepest ring that fits.
    std::optional<GemmConfig> decode_heuristic(const DeviceInfo& device) const {
        if (device.sm() != 90 || !groups_.masked || p_.rows > 64) return std::nullopt;
        std::optional<GemmConfig> chosen;
        for (int block_n : {256, 128, 64}) {
            GemmConfig c;
            c.kernel = kGemmSm90, c.block_m = 64, c.consumers = 1, c.block_n = block_n, c.block_k = 64, c.group_m = 8;
            c.stages = kGemmSm90MaxStages;
            if (!fit_stages(c, device)) continue;
            chosen = c;
            if ((p_.n + block_n - 1) / block_n * std::min<int64_t>(p_.groups, 8) >= device.sm_count) break;
        }
        return chosen;
    }
    // Groups of a few hundred rows (prefill over many experts: DeepSeek, Kimi K2, Qwen3-MoE at a
    // few thousand tokens): 128 x 128 tiles whose two consumers take whole tiles in turn, so one's
    // epilogue hides under the other's main loop. The batched GEMM's choice for the average group
    // (64 x 256 with one consumer, or 128 x 256) ran 16-59% slower there (H100, docs/perf/gemm_grouped.md);
    // from about 512 rows a group the wider 128 x 256 tiles win again.
    std::optional<GemmConfig> few_hundred_rows_heuristic(const DeviceInfo& device) const {
        const int64_t rows = groups_.typical_rows();
        if (device.sm() != 90 || groups_.masked || rows <= 128 || rows >= 448) return std::nullopt;
        GemmConfig c;
        c.kernel = kGemmSm90, c.block_m = 128, c.block_n = 128, c.block_k = 64, c.consumers = 2, c.pingpong = 1;
        c.cluster = 1, c.group_m = 8, c.stages = 6;
        if (!fit_stages(c, device)) return std::nullopt;
        return c;
    }
    // Drops stages from c's ring (down to 2) until the grouped kernel takes it (shared memory,
    // the groups' table included, is what a deeper ring runs out of); false if none does.
    bool fit_stages(GemmConfig& c, const DeviceInfo& device) const {
        while (c.stages > 2 && invalid_reason(c.to_config(), device)) --c.stages;
        return !invalid_reason(c.to_config(), device);
    }
    // The 16-bit TMA kernel's block pairs of 160- and 224-column tiles (D stored from registers,
    // 80 or 112 accumulators a thread) spill a few bytes once the schedule's tile bounds are live
    // too (ptxas, sm_90a).
    static bool grouped_spills(const GemmConfig& c) { return c.cluster == 2 && (c.block_n == 160 || c.block_n == 224); }
    unsigned shared_bytes(const GemmConfig& c) const {
        return c.shared_bytes(shape_) + gemm_groups_table_bytes(static_cast<int>(p_.groups));
    }
    // The most units the groups' tiles can make (the schedule's table counts in int): each group
    // wastes at most one partial unit of rows.
    int64_t max_units(const GemmConfig& c) const {
        return groups_.max_units(int64_t{c.block_m} * (c.kernel == kGemmSm90 ? c.cluster : 1), p_.n, c.block_n);
    }

    GemmGroupedProblem p_;
    GemmGroups groups_;
    GemmShape shape_;
    GemmDStore d_store_;
};

namespace {

// Checks run()'s operands (throws InvalidArgument naming the one that is wrong).
void bind(const GemmGroupedProblem& p, const GemmGroups& g, Inputs inputs, Outputs outputs) {
    check_count(kOp, "inputs", inputs.size(), 3, "A, B, group_rows");
    check_count(kOp, "outputs", outputs.size(), 1, "D");
    const RowsSpan a = g.check_rows_operand(kOp, "A", inputs[0], p.dtype, p.k, p.lda);
    const RowsSpan b = check_gemm_operand(kOp, p.groups, "B", inputs[1], p.dtype, b_rows(p), b_cols(p), p.ldb, p.group_stride_b);
    check_tma_operands_aligned(kOp, inputs[0].data(), inputs[1].data());
    const RowsSpan groups = g.check_group_rows(kOp, inputs[2]);
    const RowsSpan d = g.check_rows_operand(kOp, "D", outputs[0], *p.out_dtype, p.n, p.ldd);
    for (const RowsSpan& other : {a, b, groups}) check_output_overlap(kOp, d, other, false);
}

}  // namespace
}  // namespace detail

GemmGrouped::GemmGrouped(const GemmGroupedProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::GemmGroupedModel>(detail::normalized(problem)));
}

namespace detail {

int GemmGroupedModel::vector_width(Inputs inputs, Outputs outputs) const {
    bind(p_, groups_, inputs, outputs);
    return d_store_.width(outputs[0].data());
}

void GemmGroupedModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    const GemmGroupedProblem& p = p_;
    const auto& tile = std::any_cast<const GemmGroupedTile&>(launch.details);
    GemmArgs args = groups_.kernel_args({inputs[0].data(), inputs[1].data(), outputs[0].data(), inputs[2].data(), p.n, p.k,
                                         p.lda, p.ldb, p.ldd, p.group_stride_b, p.alpha},
                                        tile.block_m);
    if (!tile.tma) {
        void* params[] = {&args};
        detail::launch(launch, params, stream, *this);
        return;
    }
    const unsigned block_n = static_cast<unsigned>(tile.block_n);
    alignas(64) CUtensorMap map_a = groups_.a_map(args, p.dtype);
    alignas(64) CUtensorMap map_b =
        nt(p) ? gemm_tensor_map(args.b, p.dtype, p.n, p.k, p.ldb, p.groups, p.group_stride_b, tile.paired ? block_n / 2 : block_n)
              : gemm_tensor_map(args.b, p.dtype, p.k, p.n, p.ldb, p.groups, p.group_stride_b, 64);
    alignas(64) CUtensorMap map_d = dtype_size(*p.out_dtype) == 2 && d_store_.aligned(args.d) ? groups_.d_map(args, *p.out_dtype) : map_a;
    void* params[] = {&map_a, &map_b, &map_d, &args};
    detail::launch(launch, params, stream, *this);
}

}  // namespace detail
}  // namespace tileops
