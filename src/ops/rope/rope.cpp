// Rotary position embedding with the KV-cache append: problem checks, frequencies, tuning key and
// kernel choice (RopeModel), and Rope::run. Kernel: kernel_templates/rope/rope.cuh.
#include "tileops/rope.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/launch.hpp"
#include "core/op_model.hpp"
#include "core/validation.hpp"
#include "rope/rope_args.cuh"  // kernel_templates/: the kernel's argument block
#include "tileops/error.hpp"

namespace tileops {
namespace detail {
namespace {

constexpr const char* kOp = "Rope";
constexpr long long kMaxBlocks = 1 << 16;  // the kernel walks further units in steps of the grid
constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
constexpr double kPi = 3.14159265358979323846;

// theta^(-2i / rotary_dim), stretched as the scaling says; computed in double, rounded once.
std::vector<float> frequencies_of(const RopeProblem& p) {
    const int64_t pairs = p.rotary_dim / 2;
    const RopeScaling& s = p.scaling;
    std::vector<float> inv_freq(static_cast<size_t>(pairs));
    for (int64_t i = 0; i < pairs; ++i) {
        double f = std::pow(p.theta, -2.0 * static_cast<double>(i) / static_cast<double>(p.rotary_dim));
        if (s.type == RopeScaling::Type::linear) {
            f /= s.factor;
        } else if (s.type == RopeScaling::Type::llama3) {
            // Llama 3.1: long wavelengths slowed by `factor`, short ones kept, a linear blend of
            // the two (in original_max_positions / wavelength) between.
            const double wavelength = 2.0 * kPi / f;
            const double low_wavelength = s.original_max_positions / s.low_freq_factor;
            const double high_wavelength = s.original_max_positions / s.high_freq_factor;
            if (wavelength > low_wavelength) {
                f /= s.factor;
            } else if (wavelength >= high_wavelength) {
                const double smooth = (s.original_max_positions / wavelength - s.low_freq_factor) /
                                      (s.high_freq_factor - s.low_freq_factor);
                f = (1.0 - smooth) * f / s.factor + smooth * f;
            }
        }
        inv_freq[static_cast<size_t>(i)] = static_cast<float>(f);
    }
    return inv_freq;
}

// The kernel's argument block without the operands' pointers: sizes, strides, scales and the
// frequencies, the same for every launch of a problem.
RopeArgs constant_args(const RopeProblem& p) {
    RopeArgs args{};
    args.num_tokens = p.num_tokens;
    args.q_stride = p.q_stride, args.k_stride = p.k_stride;
    args.q_out_stride = p.q_out_stride, args.k_out_stride = p.k_out_stride;
    args.k_scale_inv = args.v_scale_inv = 1.0f;
    if (p.append_kv) {
        args.v_stride = p.v_stride;
        args.cache_page_stride = p.cache_page_stride;
        args.cache_token_stride = p.cache_token_stride;
        args.cache_head_stride = p.cache_head_stride;
        args.page_size = static_cast<int>(p.page_size);
        args.num_slots = static_cast<int>(p.num_pages * p.page_size);
        if (*p.kv_dtype == DType::fp8_e4m3) {
            args.k_scale_inv = 1.0f / p.k_scale;
            args.v_scale_inv = 1.0f / p.v_scale;
        }
    }
    const std::vector<float> inv_freq = frequencies_of(p);
    std::copy(inv_freq.begin(), inv_freq.end(), args.inv_freq);
    return args;
}

void check_finite_positive(const char* name, double value) {
    if (!(value > 0.0) || !std::isfinite(value))
        throw InvalidArgument(fmt::format("tileops::{}: {} must be > 0 and finite, got {}", kOp, name, value));
}

}  // namespace

class RopeModel final : public OpModel {
public:
    explicit RopeModel(const RopeProblem& p) : p_(p), constant_args_(constant_args(p)), shape_vec_(dividing_vector()) {}

    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;
    const RopeProblem& problem() const noexcept { return p_; }

    std::string op_name() const override { return "rope"; }
    std::vector<long long> shape() const override { return {p_.num_tokens, p_.num_heads, p_.num_kv_heads, p_.head_dim}; }
    std::string dtype_key() const override { return dtype_name(p_.dtype); }
    // The frequencies (theta, scaling) and strides do not change the kernel, so they stay out of
    // the key: one tuning entry serves every model of the same geometry.
    std::string flags() const override {
        std::vector<std::string> list;
        if (p_.style == RopeStyle::none) list.emplace_back("norot");
        else if (p_.rotary_dim != p_.head_dim) list.push_back(fmt::format("rot{}", p_.rotary_dim));
        if (p_.style == RopeStyle::gptj) list.emplace_back("gptj");
        if (p_.append_kv) list.push_back(fmt::format("page{}", p_.page_size));
        if (p_.append_kv && *p_.kv_dtype == DType::fp8_e4m3) list.emplace_back("kv_fp8");
        return fmt::format("{}", fmt::join(list, ","));
    }

    std::vector<OperandSpec> operands() const override {
        const long long q_cols = p_.num_heads * p_.head_dim, kv_cols = p_.num_kv_heads * p_.head_dim;
        const long long tokens = p_.num_tokens;
        std::vector<OperandSpec> list{{"q", p_.dtype, tokens, q_cols, p_.q_stride, false},
                                      {"k", p_.dtype, tokens, kv_cols, p_.k_stride, false}};
        if (p_.append_kv) list.push_back({"v", p_.dtype, tokens, kv_cols, p_.v_stride, false});
        list.push_back({"positions", DType::int32, 0, tokens, tokens, false, OperandFill::scrambled_index, 8192});
        if (p_.append_kv)
            list.push_back({"slots", DType::int32, 0, tokens, tokens, false, OperandFill::scrambled_index, num_slots()});
        list.push_back({"q_out", p_.dtype, tokens, q_cols, p_.q_out_stride, true});
        list.push_back({"k_out", p_.dtype, tokens, kv_cols, p_.k_out_stride, true});
        if (p_.append_kv) {
            // Packed caches are rows of tokens (each token writes one); others are spans of pages.
            const bool packed = p_.cache_head_stride == p_.head_dim &&
                                p_.cache_page_stride == p_.page_size * p_.cache_token_stride;
            for (const char* name : {"k_cache", "v_cache"}) {
                if (packed) {
                    list.push_back({name, *p_.kv_dtype, num_slots(), kv_cols, p_.cache_token_stride, true});
                    list.back().rows_read = std::min(tokens, num_slots());
                } else {
                    list.push_back({name, *p_.kv_dtype, p_.num_pages, p_.cache_page_stride, p_.cache_page_stride, true});
                }
                list.back().partial = true;
            }
        }
        return list;
    }

    // Decode steps are a few tokens: one head a thread spreads them over the most blocks. Prefills
    // share each cos/sin over 4 heads.
    Config heuristic(const DeviceInfo&) const override {
        return {{"threads", 128}, {"vec", max_vec()}, {"heads_per_thread", p_.num_tokens >= 256 ? 4 : 1}};
    }

    std::vector<Config> search_space(const DeviceInfo& device) const override {
        std::vector<Config> candidates;
        for (long long threads : {64, 128, 256, 512})
            for (long long vec = max_vec(); vec >= std::max(1LL, max_vec() / 2); vec /= 2)
                for (long long heads : {1, 2, 4, 8})
                    candidates.push_back({{"threads", threads}, {"vec", vec}, {"heads_per_thread", heads}});
        return valid_configs(candidates, device);
    }

    std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const override {
        long long threads = 0, vec = 0, heads = 0;
        if (auto why = read_tunables(config, op_name(), {{"threads", &threads}, {"vec", &vec}, {"heads_per_thread", &heads}})) return why;
        if (auto why = block_threads_reason(threads, device)) return why;
        if (auto why = vector_width_reason(vec, max_vec())) return why;
        if (heads < 1 || heads > 16) return fmt::format("heads_per_thread must be in [1, 16], got {}", heads);
        return std::nullopt;
    }

    std::vector<int> vector_widths(const Config& config) const override {
        return halving_widths(std::min(static_cast<int>(config.at("vec")), shape_vec_));
    }

    LaunchPlan plan(const Config& config, int vec, const DeviceInfo&) const override {
        const long long threads = config.at("threads"), heads = config.at("heads_per_thread");
        const bool fp8 = p_.append_kv && *p_.kv_dtype == DType::fp8_e4m3;
        LaunchPlan plan;
        plan.template_file = "rope/rope.cuh";
        plan.name_expression = fmt::format(
            "tileops::rope_kernel<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}>", device_type_name(p_.dtype),
            fp8 ? "__nv_fp8_e4m3" : device_type_name(p_.dtype), p_.num_heads, p_.num_kv_heads, p_.head_dim,
            p_.rotary_dim, p_.style == RopeStyle::gptj, p_.append_kv, vec, heads, threads);
        const long long units = p_.num_tokens * units_per_token(vec, heads);
        plan.grid[0] = static_cast<unsigned>(std::min((units + threads - 1) / threads, kMaxBlocks));
        plan.block[0] = static_cast<unsigned>(threads);
        return plan;
    }

private:
    long long max_vec() const {
        const size_t widest = std::max(dtype_size(p_.dtype), p_.append_kv ? dtype_size(*p_.kv_dtype) : size_t{1});
        return static_cast<long long>(16 / widest);
    }
    long long num_slots() const { return p_.num_pages * p_.page_size; }

    // The kernel's units of work for one token (rope.cuh counts them the same way).
    long long units_per_token(long long vec, long long heads_per_thread) const {
        const long long heads = p_.num_heads + p_.num_kv_heads, rot = p_.rotary_dim;
        const long long span = p_.style == RopeStyle::gptj ? std::max(vec, 2LL) : vec;
        const long long rot_chunks = p_.style == RopeStyle::gptj ? rot / span : rot / 2 / vec;
        const long long groups = (heads + heads_per_thread - 1) / heads_per_thread;
        const long long value_units = p_.append_kv ? p_.num_kv_heads * (p_.head_dim / vec) : 0;
        return groups * rot_chunks + heads * ((p_.head_dim - rot) / vec) + value_units;
    }

    // The widest vector dividing every dim and stride a vector may cross.
    int dividing_vector() const {
        const int64_t rot_span = p_.style == RopeStyle::gptj ? p_.rotary_dim : p_.rotary_dim / 2;
        return widest_dividing_vector(
            8, {p_.head_dim, rot_span, p_.q_stride, p_.k_stride, p_.v_stride, p_.q_out_stride, p_.k_out_stride,
                p_.cache_page_stride, p_.cache_token_stride, p_.cache_head_stride});
    }

    RopeProblem p_;
    RopeArgs constant_args_;  // everything but the pointers, filled once
    int shape_vec_;
};

namespace {

RopeProblem normalized(RopeProblem p) {
    check_in_range(kOp, "num_tokens", p.num_tokens, 1, kIntMax);
    check_in_range(kOp, "num_heads", p.num_heads, 1, 1024);
    check_in_range(kOp, "num_kv_heads", p.num_kv_heads, 1, 1024);
    check_in_range(kOp, "head_dim", p.head_dim, 2, 2 * kRopeMaxFrequencies);
    if (p.head_dim % 2 != 0) throw InvalidArgument(fmt::format("tileops::{}: head_dim must be even, got {}", kOp, p.head_dim));
    if (p.style != RopeStyle::neox && p.style != RopeStyle::gptj && p.style != RopeStyle::none)
        throw InvalidArgument(
            fmt::format("tileops::{}: style must be neox, gptj or none, got {}", kOp, static_cast<int>(p.style)));
    if (p.style == RopeStyle::none) {
        // Nothing rotates: the kernel copies every element as it does those past rotary_dim.
        if (p.rotary_dim != 0)
            throw InvalidArgument(fmt::format("tileops::{}: style none rotates nothing; rotary_dim must be 0, got {}",
                                              kOp, p.rotary_dim));
    } else {
        if (p.rotary_dim == 0) p.rotary_dim = p.head_dim;
        check_in_range(kOp, "rotary_dim", p.rotary_dim, 2, p.head_dim);
        if (p.rotary_dim % 2 != 0)
            throw InvalidArgument(fmt::format("tileops::{}: rotary_dim must be even, got {}", kOp, p.rotary_dim));
    }
    check_finite_positive("theta", p.theta);
    const RopeScaling& s = p.scaling;
    switch (s.type) {
    case RopeScaling::Type::none:
        break;
    case RopeScaling::Type::linear:
        check_finite_positive("scaling.factor", s.factor);
        break;
    case RopeScaling::Type::llama3:
        check_finite_positive("scaling.factor", s.factor);
        check_finite_positive("scaling.low_freq_factor", s.low_freq_factor);
        check_finite_positive("scaling.high_freq_factor", s.high_freq_factor);
        check_finite_positive("scaling.original_max_positions", s.original_max_positions);
        if (!(s.high_freq_factor > s.low_freq_factor))
            throw InvalidArgument(fmt::format("tileops::{}: scaling.high_freq_factor ({}) must exceed low_freq_factor ({})",
                                              kOp, s.high_freq_factor, s.low_freq_factor));
        break;
    default:
        throw InvalidArgument(fmt::format("tileops::{}: scaling.type must be none, linear or llama3, got {}", kOp,
                                          static_cast<int>(s.type)));
    }
    check_float_dtype(kOp, "dtype", p.dtype);

    const int64_t q_cols = p.num_heads * p.head_dim, kv_cols = p.num_kv_heads * p.head_dim;
    p.q_stride = row_stride(kOp, "q_stride", p.q_stride, p.num_tokens, q_cols);
    p.q_out_stride = row_stride(kOp, "q_out_stride", p.q_out_stride, p.num_tokens, q_cols);
    p.k_stride = row_stride(kOp, "k_stride", p.k_stride, p.num_tokens, kv_cols);
    p.k_out_stride = row_stride(kOp, "k_out_stride", p.k_out_stride, p.num_tokens, kv_cols);

    if (!p.append_kv) {
        if (p.v_stride != 0 || p.page_size != 0 || p.num_pages != 0 || p.kv_dtype || p.k_scale != 1.0f ||
            p.v_scale != 1.0f || p.cache_page_stride != 0 || p.cache_token_stride != 0 || p.cache_head_stride != 0)
            throw InvalidArgument(fmt::format("tileops::{}: v_stride, the cache's geometry, kv_dtype and the scales "
                                              "apply with append_kv only", kOp));
        return p;
    }
    p.v_stride = row_stride(kOp, "v_stride", p.v_stride, p.num_tokens, kv_cols);
    check_in_range(kOp, "page_size", p.page_size, 1, kIntMax);
    check_in_range(kOp, "num_pages", p.num_pages, 1, kIntMax / p.page_size);
    p.kv_dtype = kv_cache_dtype(kOp, p.dtype, p.kv_dtype, p.k_scale, p.v_scale);
    p.cache_head_stride = stride_or_packed(kOp, "cache_head_stride", p.cache_head_stride, p.head_dim);
    p.cache_token_stride = stride_or_packed(kOp, "cache_token_stride", p.cache_token_stride,
                                            saturating_product(p.num_kv_heads, p.cache_head_stride));
    p.cache_page_stride = stride_or_packed(kOp, "cache_page_stride", p.cache_page_stride,
                                           std::max(saturating_product(p.page_size, p.cache_token_stride),
                                                    saturating_product(p.num_kv_heads, p.cache_head_stride)));
    check_span(kOp, "the cache", p.head_dim, {{"cache_page_stride", p.num_pages, p.cache_page_stride},
                                              {"cache_token_stride", p.page_size, p.cache_token_stride},
                                              {"cache_head_stride", p.num_kv_heads, p.cache_head_stride}});
    // Distinct cache rows must not share elements (tokens writing them would race).
    check_rows_disjoint(kOp, p.head_dim, {{"cache_page_stride", p.num_pages, p.cache_page_stride},
                                          {"cache_token_stride", p.page_size, p.cache_token_stride},
                                          {"cache_head_stride", p.num_kv_heads, p.cache_head_stride}});
    return p;
}

// A [num_tokens, heads, head_dim] operand with heads contiguous; returns its rows for the
// overlap checks.
RowsSpan check_tokens(const char* name, const void* data, const TensorView* view, const RopeProblem& p, int64_t heads,
                      int64_t stride) {
    check_tensor(kOp, name, data, view, p.dtype, {p.num_tokens, heads, p.head_dim}, {stride, p.head_dim, 1},
                 dtype_size(p.dtype), heads == p.num_heads ? "[num_tokens, num_heads, head_dim]"
                                                           : "[num_tokens, num_kv_heads, head_dim]");
    return {name, data, p.num_tokens, heads * p.head_dim, stride, dtype_size(p.dtype)};
}

// A cache: its whole extent as one row, for the overlap checks.
RowsSpan check_cache(const char* name, const void* data, const TensorView* view, const RopeProblem& p) {
    check_tensor(kOp, name, data, view, *p.kv_dtype, {p.num_pages, p.page_size, p.num_kv_heads, p.head_dim},
                 {p.cache_page_stride, p.cache_token_stride, p.cache_head_stride, 1}, dtype_size(*p.kv_dtype),
                 "[num_pages, page_size, num_kv_heads, head_dim]");
    const int64_t extent = (p.num_pages - 1) * p.cache_page_stride + (p.page_size - 1) * p.cache_token_stride +
                           (p.num_kv_heads - 1) * p.cache_head_stride + p.head_dim;
    return {name, data, 1, extent, extent, dtype_size(*p.kv_dtype)};
}

// Checks run()'s operands; returns the widest vector width the shape and every pointer allow.
int bind(const RopeProblem& p, int shape_vec, Inputs inputs, Outputs outputs) {
    check_count(kOp, "inputs", inputs.size(), p.append_kv ? 5 : 3, p.append_kv ? "q, k, v, positions, slots" : "q, k, positions");
    check_count(kOp, "outputs", outputs.size(), p.append_kv ? 4 : 2,
                p.append_kv ? "q_out, k_out, k_cache, v_cache" : "q_out, k_out");
    const TensorArg* in = inputs.begin();
    const OutputArg* out = outputs.begin();
    const size_t element = dtype_size(p.dtype);
    std::vector<RowsSpan> reads{check_tokens("q", in[0].data(), in[0].view(), p, p.num_heads, p.q_stride),
                                check_tokens("k", in[1].data(), in[1].view(), p, p.num_kv_heads, p.k_stride)};
    const size_t positions_index = p.append_kv ? 3 : 2;
    if (p.append_kv) reads.push_back(check_tokens("v", in[2].data(), in[2].view(), p, p.num_kv_heads, p.v_stride));
    reads.push_back(check_operand(kOp, "positions", in[positions_index].data(), in[positions_index].view(), DType::int32,
                                  0, p.num_tokens, 1));
    if (p.append_kv)
        reads.push_back(check_operand(kOp, "slots", in[4].data(), in[4].view(), DType::int32, 0, p.num_tokens, 1));
    std::vector<RowsSpan> writes{check_tokens("q_out", out[0].data(), out[0].view(), p, p.num_heads, p.q_out_stride),
                                 check_tokens("k_out", out[1].data(), out[1].view(), p, p.num_kv_heads, p.k_out_stride)};
    if (p.append_kv) {
        writes.push_back(check_cache("k_cache", out[2].data(), out[2].view(), p));
        writes.push_back(check_cache("v_cache", out[3].data(), out[3].view(), p));
    }
    // q_out may be q and k_out k, exactly; nothing else may share memory with an output.
    for (size_t w = 0; w < writes.size(); ++w) {
        for (size_t r = 0; r < reads.size(); ++r) check_output_overlap(kOp, writes[w], reads[r], w == r && w < 2);
        for (size_t other = w + 1; other < writes.size(); ++other) check_output_overlap(kOp, writes[w], writes[other], false);
    }

    int vec = shape_vec;
    for (size_t i = 0; i < 2; ++i) {
        vec = widest_aligned_vector(vec, in[i].data(), element);
        vec = widest_aligned_vector(vec, out[i].data(), element);
    }
    if (p.append_kv) {
        vec = widest_aligned_vector(vec, in[2].data(), element);
        for (size_t i : {size_t{2}, size_t{3}}) vec = widest_aligned_vector(vec, out[i].data(), dtype_size(*p.kv_dtype));
    }
    return vec;
}

}  // namespace
}  // namespace detail

Rope::Rope(const RopeProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::RopeModel>(detail::normalized(problem)));
}

std::vector<float> Rope::frequencies() const { return detail::frequencies_of(*problem_); }

namespace detail {

int RopeModel::vector_width(Inputs inputs, Outputs outputs) const { return detail::bind(p_, shape_vec_, inputs, outputs); }

void RopeModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    const TensorArg* in = inputs.begin();
    const OutputArg* out = outputs.begin();
    RopeArgs args = constant_args_;
    args.q = in[0].data();
    args.k = in[1].data();
    args.positions = static_cast<const int*>(in[p_.append_kv ? 3 : 2].data());
    args.q_out = out[0].data();
    args.k_out = out[1].data();
    if (p_.append_kv) {
        args.v = in[2].data();
        args.slots = static_cast<const int*>(in[4].data());
        args.k_cache = out[2].data();
        args.v_cache = out[3].data();
    }
    void* params[] = {&args};
    detail::launch(launch, params, stream, *this);
}

}  // namespace detail
}  // namespace tileops
