// Activation quantization to fp8 e4m3: problem checks, tuning key and kernel choice
// (QuantizeModel), and Quantize::run. Kernels: kernel_templates/quantize/ (per_token.cuh,
// block_1x128.cuh, per_tensor.cuh).
#include "tileops/quantize.hpp"

#include <algorithm>
#include <any>
#include <limits>

#include <fmt/format.h>

#include "core/launch.hpp"
#include "core/op_model.hpp"
#include "core/validation.hpp"
#include "quantize/quantize_args.cuh"  // kernel_templates/: the kernels' argument block
#include "tileops/error.hpp"

namespace tileops {

const char* quantize_scaling_name(QuantizeScaling scaling) noexcept {
    switch (scaling) {
        case QuantizeScaling::per_tensor: return "per_tensor";
        case QuantizeScaling::per_token: return "per_token";
        case QuantizeScaling::block_1x128: return "block_1x128";
    }
    return "unknown";
}

namespace detail {
namespace {

constexpr const char* kOp = "Quantize";
constexpr long long kMaxGridX = std::numeric_limits<int32_t>::max();
constexpr long long kMaxGridY = 65535;  // rows beyond it are walked in steps of the grid
constexpr long long kMaxVec = 8;        // 16 bytes of a 16-bit x (8 bytes of codes)
constexpr long long kMaxItems = 16;     // vectors (blocks, for block_1x128) a thread holds in a config
// per_token at a launch width narrower than its config's: items grow to keep a chunk's columns, up
// to this many.
constexpr long long kMaxLaunchItems = 32;

long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

long long next_pow2(long long n) {
    long long p = 1;
    while (p < n && p < (1LL << 40)) p <<= 1;
    return p;
}

bool is_pow2(long long n) { return n > 0 && (n & (n - 1)) == 0; }

int log2_of(long long pow2) {
    int log = 0;
    while ((1LL << log) < pow2) ++log;
    return log;
}

// Bytes of x a thread may hold in registers without spilling (the row ops' bound): 64 registers
// a thread at 1024 threads, 128 at 512 or fewer, about half of them for the values.
long long held_bytes_limit(long long block_threads) { return block_threads > 512 ? 64 : 128; }

// What a block_1x128 launch needs beside its geometry: the shape of a CTA's tile of teams.
struct QuantizeLaunch {
    int tile_log2 = 0;
};

}  // namespace

class QuantizeModel final : public OpModel {
public:
    explicit QuantizeModel(const QuantizeProblem& p) : p_(p), shape_vec_(shape_vector()) {}
    const QuantizeProblem& problem() const noexcept { return p_; }

    std::string op_name() const override { return "quantize"; }
    std::vector<long long> shape() const override { return {p_.rows, p_.cols}; }
    std::string dtype_key() const override {
        return fmt::format("{}->{}", dtype_name(p_.dtype), dtype_name(p_.out_dtype));
    }
    // The scaling names the kernel: per_token, block_1x128, per_tensor (computed) or
    // per_tensor_static.
    std::string flags() const override {
        return p_.static_scale ? "per_tensor_static" : quantize_scaling_name(p_.scaling);
    }

    std::vector<OperandSpec> operands() const override {
        std::vector<OperandSpec> list{{"x", p_.dtype, p_.rows, p_.cols, p_.x_stride, false}};
        if (p_.static_scale) {
            // x is filled in [-2, 2]: this scale maps it onto [-448, 448].
            list.push_back({"scale", DType::fp32, 0, 1, 1, false, OperandFill::constant_real, 0, 2.0 / 448.0});
        }
        list.push_back({"q", p_.out_dtype, p_.rows, p_.cols, p_.q_stride, true});
        if (p_.scaling == QuantizeScaling::per_token)
            list.push_back({"scales", DType::fp32, 0, p_.rows, p_.rows, true});
        else if (p_.scaling == QuantizeScaling::block_1x128)
            list.push_back({"scales", DType::fp32, column_blocks(), p_.rows, p_.scale_stride, true});
        else if (!p_.static_scale)
            list.push_back({"scales", DType::fp32, 0, 1, 1, true});
        return list;
    }

    Config heuristic(const DeviceInfo& device) const override;
    std::vector<Config> search_space(const DeviceInfo& device) const override;
    std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const override;

    std::vector<int> vector_widths(const Config& config) const override {
        return halving_widths(static_cast<int>(std::min<long long>(config.at("vec"), shape_vec_)));
    }

    LaunchPlan plan(const Config& config, int vec, const DeviceInfo& device) const override;

    size_t workspace_bytes(const Config&, int) const override {
        return computed_per_tensor() ? 2 * sizeof(unsigned) : 0;  // {amax bits, CTAs done}
    }

    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;

private:
    bool computed_per_tensor() const { return p_.scaling == QuantizeScaling::per_tensor && !p_.static_scale; }
    long long column_blocks() const { return ceil_div(p_.cols, kQuantizeBlockCols); }
    long long element_bytes() const { return static_cast<long long>(dtype_size(p_.dtype)); }
    // The per-tensor kernels take contiguous rows as one row of rows x cols elements: wider vectors
    // for odd cols, and no idle threads at the ends of short rows.
    bool flat() const {
        return p_.scaling == QuantizeScaling::per_tensor &&
               (p_.rows == 1 || (p_.x_stride == p_.cols && p_.q_stride == p_.cols));
    }
    long long kernel_rows() const { return flat() ? 1 : p_.rows; }
    long long kernel_cols() const { return flat() ? p_.rows * p_.cols : p_.cols; }
    // The widest vector the shape and strides allow: it must divide a row and both strides, so
    // that a vector is all inside a row or all out.
    int shape_vector() const {
        if (flat()) return widest_dividing_vector(static_cast<int>(kMaxVec), {kernel_cols()});
        return widest_dividing_vector(static_cast<int>(kMaxVec), {p_.cols, p_.x_stride, p_.q_stride});
    }

    // block_1x128: teams along a row in a CTA of `teams` teams taking `items` blocks each.
    long long tile_x(long long teams, long long items) const {
        return std::min(teams, next_pow2(ceil_div(column_blocks(), items)));
    }
    // The CTAs the amax kernel of a computed per-tensor scale runs: as many as are resident at once.
    long long amax_ctas(long long threads, const DeviceInfo& device) const {
        return std::max<long long>(1, std::max(1, device.sm_count) * std::max<long long>(1, 2048 / threads));
    }

    QuantizeProblem p_;
    int shape_vec_;
};

// ---- configs --------------------------------------------------------------------------------
//
// per_tensor: threads, items (vectors a thread takes at once), vec.
// per_token: threads_per_row (a power of two, 1-1024), rows_per_block, items (vectors of the row a
//   thread holds), vec.
// block_1x128: threads, lanes (a team of lanes takes a 128-column block: 4-32, lanes x vec <= 128),
//   items (blocks a team takes at once), vec.

Config QuantizeModel::heuristic(const DeviceInfo&) const {
    const long long vec = shape_vec_;
    const long long elem = element_bytes();
    switch (p_.scaling) {
        case QuantizeScaling::per_token: {
            // About four 16-byte vectors in flight a thread, the whole row in registers (read once)
            // where a block holds it; short rows share a block of 256 threads.
            const long long tpr = std::clamp<long long>(next_pow2(ceil_div(p_.cols, vec * 4)), 1, 1024);
            const long long rpb = std::max<long long>(1, 256 / tpr);
            const long long cap = std::min(kMaxItems, held_bytes_limit(tpr * rpb) / (vec * elem));
            const long long items = std::min(ceil_div(p_.cols, tpr * vec), cap);
            return {{"threads_per_row", tpr}, {"rows_per_block", rpb}, {"items", items}, {"vec", vec}};
        }
        case QuantizeScaling::block_1x128: {
            // A team reads a block as one vector a lane (16 lanes of 8 at 16-bit x), four blocks in
            // flight.
            const long long lanes = std::min<long long>(32, kQuantizeBlockCols / vec);
            const long long items = std::min<long long>(4, column_blocks());
            return {{"threads", 256}, {"lanes", lanes}, {"items", items}, {"vec", vec}};
        }
        case QuantizeScaling::per_tensor: break;
    }
    const long long items = std::clamp<long long>(ceil_div(kernel_cols(), 256 * vec), 1, 4);
    return {{"threads", 256}, {"items", items}, {"vec", vec}};
}

std::vector<Config> QuantizeModel::search_space(const DeviceInfo& device) const {
    std::vector<Config> candidates;
    const long long elem = element_bytes();
    for (long long vec = shape_vec_; vec >= std::max(1, shape_vec_ / 2); vec /= 2) {
        switch (p_.scaling) {
            case QuantizeScaling::per_token:
                for (long long tpr = 1; tpr <= 1024; tpr *= 2) {
                    if (tpr > 32 && tpr / 2 * vec >= p_.cols) break;  // half the row's group would idle
                    for (long long block : {32, 64, 128, 256, 512, 1024}) {
                        if (tpr > block) continue;
                        const long long rpb = block / tpr;
                        if (rpb > 1 && rpb >= 4 * p_.rows) continue;  // most of the block's rows would idle
                        const long long cap = std::min(kMaxItems, held_bytes_limit(block) / (vec * elem));
                        const long long needed = ceil_div(p_.cols, tpr * vec);
                        if (needed > cap && tpr < 256) continue;  // only wide groups take rows in chunks
                        candidates.push_back({{"threads_per_row", tpr},
                                              {"rows_per_block", rpb},
                                              {"items", std::min(needed, cap)},
                                              {"vec", vec}});
                    }
                }
                break;
            case QuantizeScaling::block_1x128:
                for (long long threads : {128, 256, 512})
                    for (long long lanes : {8, 16, 32})
                        for (long long items : {1, 2, 4, 8})
                            if (items == 1 || items / 2 < column_blocks())
                                candidates.push_back({{"threads", threads}, {"lanes", lanes}, {"items", items}, {"vec", vec}});
                break;
            case QuantizeScaling::per_tensor:
                for (long long threads : {128, 256, 512, 1024})
                    for (long long items : {1, 2, 4, 8})
                        if (items == 1 || threads * items / 2 * vec < kernel_cols())
                            candidates.push_back({{"threads", threads}, {"items", items}, {"vec", vec}});
                break;
        }
    }
    return valid_configs(candidates, device);
}

std::optional<std::string> QuantizeModel::invalid_reason(const Config& config, const DeviceInfo& device) const {
    const long long elem = element_bytes();
    long long vec = 0, items = 0;
    if (p_.scaling == QuantizeScaling::per_token) {
        long long tpr = 0, rpb = 0;
        if (auto why = read_tunables(config, op_name(),
                                     {{"threads_per_row", &tpr}, {"rows_per_block", &rpb}, {"items", &items}, {"vec", &vec}}))
            return why;
        if (!is_pow2(tpr) || tpr > 1024) return fmt::format("threads_per_row = {} is not a power of two in [1, 1024]", tpr);
        if (rpb < 1) return "rows_per_block must be >= 1";
        if (auto why = block_threads_reason(tpr * rpb, device)) return why;
        if (auto why = vector_width_reason(vec, kMaxVec)) return why;
        if (items < 1 || items > kMaxItems) return fmt::format("items = {} is not in [1, {}]", items, kMaxItems);
        if (items * vec * elem > held_bytes_limit(tpr * rpb))
            return fmt::format("items x vec = {} x {} holds more than {} bytes a thread at {} threads (it would spill)",
                               items, vec, held_bytes_limit(tpr * rpb), tpr * rpb);
        return std::nullopt;
    }
    long long threads = 0;
    if (p_.scaling == QuantizeScaling::block_1x128) {
        long long lanes = 0;
        if (auto why = read_tunables(config, op_name(),
                                     {{"threads", &threads}, {"lanes", &lanes}, {"items", &items}, {"vec", &vec}}))
            return why;
        if (auto why = block_threads_reason(threads, device)) return why;
        if (auto why = vector_width_reason(vec, kMaxVec)) return why;
        if (!is_pow2(lanes) || lanes < 4 || lanes > 32) return fmt::format("lanes = {} is not a power of two in [4, 32]", lanes);
        if (lanes * vec > kQuantizeBlockCols)
            return fmt::format("lanes x vec = {} x {} is wider than a block of {} columns", lanes, vec, kQuantizeBlockCols);
        if (items < 1 || items > kMaxItems) return fmt::format("items = {} is not in [1, {}]", items, kMaxItems);
        if (items * (kQuantizeBlockCols / lanes) * elem > held_bytes_limit(threads))
            return fmt::format("items x 128 / lanes = {} x {} elements hold more than {} bytes a thread at {} threads "
                               "(it would spill)",
                               items, kQuantizeBlockCols / lanes, held_bytes_limit(threads), threads);
        const long long narrowest = std::max<long long>(1, items / 2);  // the items of a launch at vec 1 (plan)
        if (ceil_div(column_blocks(), tile_x(threads / lanes, narrowest) * narrowest) > kMaxGridX)
            return "too many blocks along the row";
        return std::nullopt;
    }
    if (auto why = read_tunables(config, op_name(), {{"threads", &threads}, {"items", &items}, {"vec", &vec}})) return why;
    if (auto why = block_threads_reason(threads, device)) return why;
    if (auto why = vector_width_reason(vec, kMaxVec)) return why;
    if (items < 1 || items > kMaxItems) return fmt::format("items = {} is not in [1, {}]", items, kMaxItems);
    if (items * vec * elem > held_bytes_limit(threads))
        return fmt::format("items x vec = {} x {} holds more than {} bytes a thread at {} threads (it would spill)", items,
                           vec, held_bytes_limit(threads), threads);
    return std::nullopt;
}

LaunchPlan QuantizeModel::plan(const Config& config, int vec, const DeviceInfo& device) const {
    const char* type = device_type_name(p_.dtype);
    LaunchPlan plan;
    switch (p_.scaling) {
        case QuantizeScaling::per_token: {
            const long long tpr = config.at("threads_per_row"), rpb = config.at("rows_per_block");
            long long items = config.at("items");
            if (vec < config.at("vec")) {
                // Narrower vectors: more of them, so that a chunk still spans what the config's did
                // (up to the row, and the launch's bound); single elements take a register each, so
                // half as many of those.
                const long long grown = items * (config.at("vec") / vec) / (vec == 1 ? 2 : 1);
                items = std::min({grown, std::max(items, ceil_div(p_.cols, tpr * vec)), kMaxLaunchItems});
            }
            plan.template_file = "quantize/per_token.cuh";
            plan.name_expression =
                fmt::format("tileops::quantize_per_token_kernel<{}, {}, {}, {}, {}>", type, vec, tpr, rpb, items);
            plan.grid[0] = static_cast<unsigned>(std::min(ceil_div(p_.rows, rpb), kMaxGridX));
            plan.block[0] = static_cast<unsigned>(tpr * rpb);
            return plan;
        }
        case QuantizeScaling::block_1x128: {
            const long long threads = config.at("threads"), lanes = config.at("lanes");
            // Single elements take a register each: half as many blocks in flight.
            const long long items = vec == 1 ? std::max<long long>(1, config.at("items") / 2) : config.at("items");
            const long long teams = threads / lanes;
            const long long tx = tile_x(teams, items);
            plan.template_file = "quantize/block_1x128.cuh";
            plan.name_expression = fmt::format("tileops::quantize_block_1x128_kernel<{}, {}, {}, {}, {}>", type, vec,
                                               threads, lanes, items);
            plan.grid[0] = static_cast<unsigned>(ceil_div(column_blocks(), tx * items));
            plan.grid[1] = static_cast<unsigned>(std::min(ceil_div(p_.rows, teams / tx), kMaxGridY));
            plan.block[0] = static_cast<unsigned>(threads);
            plan.details = QuantizeLaunch{log2_of(tx)};
            return plan;
        }
        case QuantizeScaling::per_tensor: break;
    }
    const long long threads = config.at("threads"), items = config.at("items");
    const long long chunks = ceil_div(kernel_cols(), threads * items * vec);
    plan.template_file = "quantize/per_tensor.cuh";
    plan.name_expression = fmt::format("tileops::quantize_per_tensor_kernel<{}, {}, {}, {}, {}>", type, vec, threads,
                                       items, !p_.static_scale);
    plan.grid[0] = static_cast<unsigned>(std::min(chunks, kMaxGridX));
    plan.grid[1] = static_cast<unsigned>(std::min(kernel_rows(), kMaxGridY));
    plan.block[0] = static_cast<unsigned>(threads);
    if (!p_.static_scale) {
        // The amax pass before it: the CTAs resident at once, walking the tensor.
        const long long ctas = amax_ctas(threads, device);
        const long long grid_y = std::min({kernel_rows(), kMaxGridY, ctas});
        plan.before.name_expression =
            fmt::format("tileops::quantize_tensor_amax_kernel<{}, {}, {}, {}>", type, vec, threads, items);
        plan.before.grid[0] = static_cast<unsigned>(std::min(chunks, std::max<long long>(1, ctas / grid_y)));
        plan.before.grid[1] = static_cast<unsigned>(grid_y);
        plan.before.block[0] = static_cast<unsigned>(threads);
    }
    return plan;
}

namespace {

QuantizeProblem normalized(QuantizeProblem p) {
    check_extent(kOp, p.rows, p.cols);
    if (p.dtype != DType::bf16 && p.dtype != DType::fp16)
        throw InvalidArgument(fmt::format("tileops::{}: dtype must be bf16 or fp16, got {}", kOp, dtype_name(p.dtype)));
    if (p.out_dtype != DType::fp8_e4m3)
        throw InvalidArgument(
            fmt::format("tileops::{}: out_dtype must be fp8_e4m3, got {}", kOp, dtype_name(p.out_dtype)));
    switch (p.scaling) {
        case QuantizeScaling::per_tensor:
        case QuantizeScaling::per_token:
        case QuantizeScaling::block_1x128: break;
        default:
            throw InvalidArgument(fmt::format("tileops::{}: scaling must be per_tensor, per_token or block_1x128, got {}",
                                              kOp, static_cast<int>(p.scaling)));
    }
    if (p.static_scale && p.scaling != QuantizeScaling::per_tensor)
        throw InvalidArgument(fmt::format("tileops::{}: static_scale applies to per_tensor scaling only, not {}", kOp,
                                          quantize_scaling_name(p.scaling)));
    p.x_stride = row_stride(kOp, "x_stride", p.x_stride, p.rows, p.cols);
    p.q_stride = row_stride(kOp, "q_stride", p.q_stride, p.rows, p.cols);
    if (p.scaling == QuantizeScaling::block_1x128) {
        p.scale_stride = stride_or_packed(kOp, "scale_stride", p.scale_stride, p.rows);
        if (p.scale_stride < p.rows)
            throw InvalidArgument(fmt::format("tileops::{}: scale_stride = {} is smaller than rows = {}; the scales of "
                                              "consecutive column blocks would overlap",
                                              kOp, p.scale_stride, p.rows));
        check_span(kOp, "scales", p.rows, {{"scale_stride", ceil_div(p.cols, kQuantizeBlockCols), p.scale_stride}});
    } else {
        p.scale_stride = 0;  // unused: a leftover value must not key or refuse anything
    }
    return p;
}

// Checks run()'s operands; returns the widest vector width the shape and both pointers allow.
int bind(const QuantizeProblem& p, int shape_vec, Inputs inputs, Outputs outputs) {
    const bool given = p.static_scale;
    check_count(kOp, "inputs", inputs.size(), given ? 2 : 1, given ? "x, scale" : "x");
    check_count(kOp, "outputs", outputs.size(), given ? 1 : 2, given ? "q" : "q, scales");
    const TensorArg& x = inputs.begin()[0];
    const OutputArg& q = outputs.begin()[0];
    const RowsSpan x_span = check_operand(kOp, "x", x.data(), x.view(), p.dtype, p.rows, p.cols, p.x_stride);
    const RowsSpan q_span = check_operand(kOp, "q", q.data(), q.view(), p.out_dtype, p.rows, p.cols, p.q_stride);
    check_output_overlap(kOp, q_span, x_span, false);
    if (given) {
        const TensorArg& scale = inputs.begin()[1];
        const RowsSpan scale_span = check_operand(kOp, "scale", scale.data(), scale.view(), DType::fp32, 0, 1, 1);
        check_output_overlap(kOp, q_span, scale_span, false);
    } else {
        const OutputArg& scales = outputs.begin()[1];
        const RowsSpan scales_span =
            p.scaling == QuantizeScaling::block_1x128
                ? check_operand(kOp, "scales", scales.data(), scales.view(), DType::fp32,
                                ceil_div(p.cols, kQuantizeBlockCols), p.rows, p.scale_stride)
                : check_operand(kOp, "scales", scales.data(), scales.view(), DType::fp32, 0,
                                p.scaling == QuantizeScaling::per_token ? p.rows : 1, 1);
        check_output_overlap(kOp, scales_span, x_span, false);
        check_output_overlap(kOp, scales_span, q_span, false);
    }
    const int vec = widest_aligned_vector(shape_vec, x.data(), dtype_size(p.dtype));
    return widest_aligned_vector(vec, q.data(), dtype_size(p.out_dtype));
}

}  // namespace
}  // namespace detail

Quantize::Quantize(const QuantizeProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::QuantizeModel>(detail::normalized(problem)));
}

namespace detail {

int QuantizeModel::vector_width(Inputs inputs, Outputs outputs) const {
    return detail::bind(p_, shape_vec_, inputs, outputs);
}

void QuantizeModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    QuantizeArgs args{};
    args.x = inputs.begin()[0].data();
    args.q = outputs.begin()[0].data();
    if (p_.static_scale)
        args.scale_in = static_cast<const float*>(inputs.begin()[1].data());
    else
        args.scales = static_cast<float*>(outputs.begin()[1].data());
    args.workspace = static_cast<unsigned*>(launch.workspace_data());  // null unless the scale is computed per tensor
    args.rows = kernel_rows();
    args.cols = kernel_cols();
    args.x_stride = flat() ? kernel_cols() : p_.x_stride;
    args.q_stride = flat() ? kernel_cols() : p_.q_stride;
    args.scale_stride = p_.scale_stride;
    if (const auto* tile = std::any_cast<QuantizeLaunch>(&launch.details)) args.tile_log2 = tile->tile_log2;
    void* params[] = {&args};
    detail::launch(launch, params, stream, *this);
}

}  // namespace detail
}  // namespace tileops
