#include "autotune/candidate_bench.hpp"

#include <cmath>

#include <fmt/format.h>

#include "cuda/driver.hpp"
#include "runtime/op_state.hpp"
#include "runtime/runtime_impl.hpp"
#include "tileops/error.hpp"
#include "tuning/op_config.hpp"
#include "util/log.hpp"
#include "util/parallel_for.hpp"

namespace tileops::tuning {
namespace {

// Norm-wise relative difference; +inf when any element is not finite (unwritten or broken).
double relative_difference(const std::vector<float>& out, const std::vector<float>& ref) {
    // Partial sums per chunk, added in chunk order: the same result whatever the thread count.
    const size_t grain = 1 << 20;
    std::vector<double> diffs(util::chunk_count(out.size(), grain)), norms(diffs.size());
    std::vector<char> finite(diffs.size(), 1);
    util::parallel_for_chunks(out.size(), grain, [&](size_t chunk, size_t begin, size_t end) {
        double diff = 0, norm = 0;
        for (size_t i = begin; i < end; ++i) {
            if (!std::isfinite(out[i])) {
                finite[chunk] = 0;
                return;
            }
            diff += double(out[i] - ref[i]) * double(out[i] - ref[i]);
            norm += double(ref[i]) * double(ref[i]);
        }
        diffs[chunk] = diff;
        norms[chunk] = norm;
    });
    double diff = 0, norm = 0;
    for (size_t c = 0; c < diffs.size(); ++c) {
        if (!finite[c]) return INFINITY;
        diff += diffs[c];
        norm += norms[c];
    }
    return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

// Candidates reduce in other orders than the heuristic, so outputs differ by rounding only.
double candidate_tolerance(const std::string& dtype_key) {
    if (dtype_key.find("bf16") != std::string::npos) return 2e-2;
    if (dtype_key.find("fp16") != std::string::npos) return 2e-3;
    return 2e-5;
}

// Makes the runtime's context current first, for the operand buffers allocated after it.
Runtime& made_current(Runtime& runtime) {
    runtime.impl().make_current();
    return runtime;
}

}  // namespace

bool context_is_lost(int status) {
    switch (status) {
        case CUDA_ERROR_ILLEGAL_ADDRESS:
        case CUDA_ERROR_LAUNCH_FAILED:
        case CUDA_ERROR_ILLEGAL_INSTRUCTION:
        case CUDA_ERROR_MISALIGNED_ADDRESS:
        case CUDA_ERROR_INVALID_ADDRESS_SPACE:
        case CUDA_ERROR_INVALID_PC:
        case CUDA_ERROR_HARDWARE_STACK_ERROR:
        case CUDA_ERROR_ASSERT:
        case CUDA_ERROR_LAUNCH_TIMEOUT:
        case CUDA_ERROR_ECC_UNCORRECTABLE:
        case CUDA_ERROR_CONTEXT_IS_DESTROYED:
            return true;
        default:
            return false;
    }
}

CandidateBench::CandidateBench(Runtime& runtime, const Op& op, uint64_t seed, LengthSpread lengths)
    : runtime_(made_current(runtime)),
      op_(op),
      buffers_(op.model(), seed, lengths),
      vec_(op.vector_width(buffers_.inputs(), buffers_.outputs())),
      timer_(runtime.device()),
      tolerance_(candidate_tolerance(op.model().dtype_key())) {}

void CandidateBench::launch(const detail::ResolvedLaunch& resolved) {
    op_.launch_with(resolved, buffers_.inputs(), buffers_.outputs(), nullptr);
}

Measurement CandidateBench::measure(size_t index, const Config& config, int warmup, int repeats) {
    const auto& cu = cuda::driver();
    detail::RuntimeImpl& impl = runtime_.impl();
    impl.make_current();
    Measurement m;
    try {
        const detail::ResolvedLaunch resolved = impl.resolve_config(op_.model(), config, vec_);
        buffers_.poison_outputs();
        launch(resolved);
        TILEOPS_CU_CHECK(cu.cuCtxSynchronize());
        std::vector<float> out = buffers_.download_outputs();
        if (index == 0) {
            if (relative_difference(out, out) != 0)
                throw Error("the heuristic config left outputs unwritten or non-finite");
            reference_ = std::move(out);
        } else if (reference_.empty()) {
            throw Error("tileops: candidate 0 (the heuristic, the reference) must be measured first");
        } else if (double diff = relative_difference(out, reference_); !(diff <= tolerance_)) {
            m.failure = fmt::format("wrong output: relative difference {:.3g} to the heuristic config (tolerance {:.3g})",
                                    diff, tolerance_);
            return m;
        }
        TimingStats stats = timer_.time([&] { launch(resolved); }, warmup, repeats);
        m.ok = true;
        m.median_us = stats.median_us;
        m.spread_us = stats.spread_us();
        util::logger().debug("tileops: {} candidate {}: {:.2f} us (grid {})", op_.model().op_name(),
                             config_text(config), stats.median_us, resolved.grid[0]);
    } catch (const DriverError& e) {
        if (index == 0 || context_is_lost(e.status())) throw;
        m.failure = fmt::format("launch: {}", e.what());
    } catch (const std::exception& e) {
        if (index == 0) throw;
        m.failure = e.what();
    }
    return m;
}

std::vector<std::vector<double>> CandidateBench::retime(const std::vector<Config>& configs, int rounds) {
    detail::RuntimeImpl& impl = runtime_.impl();
    impl.make_current();
    std::vector<detail::ResolvedLaunch> resolved;
    for (const Config& config : configs) resolved.push_back(impl.resolve_config(op_.model(), config, vec_));
    std::vector<std::vector<double>> samples(configs.size());
    for (int round = 0; round < rounds; ++round)
        for (size_t i = 0; i < configs.size(); ++i)
            samples[i].push_back(timer_.time_once([&] { launch(resolved[i]); }));
    return samples;
}

}  // namespace tileops::tuning
