// Sampling: problem checks, tuning key and kernel choice (SamplingModel), and Sampling::run.
// Kernel: kernel_templates/sampling/sampling.cuh.
#include "tileops/sampling.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/launch.hpp"
#include "core/op_model.hpp"
#include "core/validation.hpp"
#include "sampling/sampling_args.cuh"  // kernel_templates/: the kernel's argument block
#include "tileops/error.hpp"

namespace tileops {
namespace detail {
namespace {

constexpr const char* kOp = "Sampling";
constexpr long long kMaxBlocks = 1 << 16;  // rows past it are walked in steps of the grid

}  // namespace

class SamplingModel final : public OpModel {
public:
    explicit SamplingModel(const SamplingProblem& p) : p_(p) {}

    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;
    const SamplingProblem& problem() const noexcept { return p_; }

    std::string op_name() const override { return "sampling"; }
    std::vector<long long> shape() const override { return {p_.batch, p_.vocab_size}; }
    std::string dtype_key() const override { return dtype_name(p_.dtype); }
    std::string flags() const override { return p_.greedy ? "greedy" : ""; }

    std::vector<OperandSpec> operands() const override {
        std::vector<OperandSpec> list{{"logits", p_.dtype, p_.batch, p_.vocab_size, p_.logits_stride, false}};
        if (!p_.greedy) {
            // Tools time the common serving setting: temperature 0.7, top-k 50, top-p 0.9.
            const auto real = [&](const char* name, double value) {
                OperandSpec spec{name, DType::fp32, 0, p_.batch, p_.batch, false, OperandFill::constant_real};
                spec.real_value = value;
                return spec;
            };
            list.push_back(real("temperature", 0.7));
            list.push_back({"top_k", DType::int32, 0, p_.batch, p_.batch, false, OperandFill::constant, 50});
            list.push_back(real("top_p", 0.9));
            list.push_back(real("min_p", 0.0));
            list.push_back({"offsets", DType::int32, 0, p_.batch, p_.batch, false, OperandFill::multiples, 1});
        }
        list.push_back({"tokens", DType::int32, 0, p_.batch, p_.batch, true});
        return list;
    }

    // Long rows: a block of 512 threads a row (the most that keep the sampling kernel's 121
    // registers without spilling), 16-byte loads.
    Config heuristic(const DeviceInfo&) const override { return {{"threads", p_.greedy ? 1024 : 512}, {"vec", max_vec()}}; }

    std::vector<Config> search_space(const DeviceInfo& device) const override {
        std::vector<Config> candidates;
        for (long long threads : {256, 512, 1024})
            for (long long vec = max_vec(); vec >= std::max(1LL, max_vec() / 2); vec /= 2)
                candidates.push_back({{"threads", threads}, {"vec", vec}});
        return valid_configs(candidates, device);
    }

    std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const override {
        long long threads = 0, vec = 0;
        if (auto why = read_tunables(config, op_name(), {{"threads", &threads}, {"vec", &vec}})) return why;
        if (auto why = block_threads_reason(threads, device)) return why;
        if (threads < 64) return fmt::format("threads must be >= 64, got {}", threads);
        if (!p_.greedy && threads > 512)
            return fmt::format("threads must be <= 512 (the sampling kernel's registers spill at {})", threads);
        if (auto why = vector_width_reason(vec, max_vec())) return why;
        return std::nullopt;
    }

    // The kernel checks each row's alignment itself (rows of an odd vocabulary alternate), so
    // one width serves every pointer.
    std::vector<int> vector_widths(const Config& config) const override {
        return {static_cast<int>(config.at("vec"))};
    }

    LaunchPlan plan(const Config& config, int vec, const DeviceInfo&) const override {
        const long long threads = config.at("threads");
        LaunchPlan plan;
        plan.template_file = "sampling/sampling.cuh";
        plan.name_expression = fmt::format("tileops::sampling_kernel<{}, {}, {}, {}>", device_type_name(p_.dtype), vec,
                                           threads, p_.greedy);
        plan.grid[0] = static_cast<unsigned>(std::min<long long>(p_.batch, kMaxBlocks));
        plan.block[0] = static_cast<unsigned>(threads);
        return plan;
    }

private:
    long long max_vec() const { return static_cast<long long>(16 / dtype_size(p_.dtype)); }

    SamplingProblem p_;
};

namespace {

SamplingProblem normalized(SamplingProblem p) {
    check_extent(kOp, p.batch, p.vocab_size);
    check_in_range(kOp, "vocab_size", p.vocab_size, 1, std::numeric_limits<int32_t>::max());
    check_float_dtype(kOp, "dtype", p.dtype);
    p.logits_stride = row_stride(kOp, "logits_stride", p.logits_stride, p.batch, p.vocab_size);
    if (p.greedy) p.seed = 0;  // unused: must not tell two greedy ops apart
    return p;
}

// Checks run()'s operands; returns the widest vector width (the kernel checks each row).
int bind(const SamplingProblem& p, int widest, Inputs inputs, Outputs outputs) {
    check_count(kOp, "inputs", inputs.size(), p.greedy ? 1 : 6,
                p.greedy ? "logits" : "logits, temperature, top_k, top_p, min_p, offsets");
    check_count(kOp, "outputs", outputs.size(), 1, "tokens");
    const TensorArg* in = inputs.begin();
    const OutputArg& tokens = outputs.begin()[0];
    const RowsSpan tokens_span =
        check_operand(kOp, "tokens", tokens.data(), tokens.view(), DType::int32, 0, p.batch, 1);
    check_output_overlap(kOp, tokens_span,
                         check_operand(kOp, "logits", in[0].data(), in[0].view(), p.dtype, p.batch, p.vocab_size,
                                       p.logits_stride),
                         false);
    if (!p.greedy) {
        const char* names[] = {"temperature", "top_k", "top_p", "min_p", "offsets"};
        const DType types[] = {DType::fp32, DType::int32, DType::fp32, DType::fp32, DType::int32};
        for (size_t i = 0; i < 5; ++i)
            check_output_overlap(kOp, tokens_span,
                                 check_operand(kOp, names[i], in[i + 1].data(), in[i + 1].view(), types[i], 0, p.batch, 1),
                                 false);
    }
    return widest;
}

}  // namespace
}  // namespace detail

Sampling::Sampling(const SamplingProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::SamplingModel>(detail::normalized(problem)));
}

namespace detail {

int SamplingModel::vector_width(Inputs inputs, Outputs outputs) const {
    return detail::bind(p_, static_cast<int>(max_vec()), inputs, outputs);
}

void SamplingModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    const TensorArg* in = inputs.begin();
    SamplingArgs args{};
    args.logits = in[0].data();
    args.stride = p_.logits_stride;
    args.vocab = p_.vocab_size;
    args.batch = p_.batch;
    if (!p_.greedy) {
        args.temperature = static_cast<const float*>(in[1].data());
        args.top_k = static_cast<const int*>(in[2].data());
        args.top_p = static_cast<const float*>(in[3].data());
        args.min_p = static_cast<const float*>(in[4].data());
        args.offsets = static_cast<const int*>(in[5].data());
    }
    args.tokens = static_cast<int*>(outputs.begin()[0].data());
    args.seed = p_.seed;
    void* params[] = {&args};
    detail::launch(launch, params, stream, *this);
}

}  // namespace detail
}  // namespace tileops
