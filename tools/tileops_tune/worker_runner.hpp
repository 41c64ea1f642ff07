// The parent side of tune_worker.hpp: runs a problem's candidates in a worker process on one GPU,
// with a watchdog. A candidate that hangs is killed after the timeout, one that traps or leaves
// the context unusable fails with the reason; either way the worker is started anew (the problem
// and its reference set up again) and the next candidate runs.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autotune/autotuner.hpp"
#include "ops/registry.hpp"

namespace tileops::cli {

class WorkerRunner final : public tuning::CandidateRunner {
public:
    // `candidate_timeout_s`: how long one candidate's check and timing may take before the worker
    // is killed (a re-timing request gets that per config).
    WorkerRunner(int device, double candidate_timeout_s);
    ~WorkerRunner() override;
    WorkerRunner(const WorkerRunner&) = delete;
    WorkerRunner& operator=(const WorkerRunner&) = delete;

    // The worker's GPU (starting the worker). Throws Error when it cannot start.
    const DeviceInfo& device();
    // The problem the next candidates belong to; sets up its operands in the worker.
    void set_problem(const detail::ProblemSpec& spec, uint64_t seed, tuning::LengthSpread lengths);
    // Workers started after the first (each a candidate that failed it).
    int restarts() const { return restarts_; }

    int vector_width() override { return vector_width_; }
    double bytes_moved() override { return bytes_moved_; }
    tuning::Measurement measure(size_t index, const Config& config, int warmup, int repeats) override;
    std::vector<std::vector<double>> retime(const std::vector<Config>& configs, int rounds) override;

private:
    // An answer line, or why there is none (the worker died or was killed; it is gone then).
    struct Reply {
        std::optional<nlohmann::json> line;
        std::string failure;
    };
    void start();
    void stop();
    void kill_worker();
    std::string reap();  // waits for the exited worker; how it ended
    void ensure_running();
    Reply exchange(const nlohmann::json& request, double timeout_s);
    nlohmann::json setup(const nlohmann::json& request);

    int device_;
    double candidate_timeout_s_;
    std::optional<DeviceInfo> info_;
    pid_t pid_ = -1;
    int to_worker_ = -1, from_worker_ = -1;
    std::string pending_;  // bytes read past the last answer line
    int starts_ = 0, restarts_ = 0;

    nlohmann::json problem_;             // the current problem's set-up request
    std::optional<Config> reference_;    // candidate 0, measured again after a restart
    int vector_width_ = 0;
    double bytes_moved_ = 0;
    std::map<Config, double> medians_;   // first-pass times, should re-timing fail
};

}  // namespace tileops::cli
