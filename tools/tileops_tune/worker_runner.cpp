#include "tileops_tune/worker_runner.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "cuda/device.hpp"
#include "tileops/error.hpp"
#include "tileops_tune/tune_worker.hpp"
#include "tuning/op_config.hpp"
#include "util/log.hpp"

extern char** environ;

namespace tileops::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Creating a context and filling a problem's operands with random values (gigabytes for a long
// decode batch) is slow but no candidate's fault: it gets a bound of its own.
constexpr double kSetupSeconds = 600;
constexpr size_t kMaxLineBytes = 64u << 20;

void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
}

bool write_all(int fd, const std::string& text) {
    size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;  // EPIPE: the worker is gone (SIGPIPE is ignored)
        done += static_cast<size_t>(n);
    }
    return true;
}

}  // namespace

WorkerRunner::WorkerRunner(int device, double candidate_timeout_s)
    : device_(device), candidate_timeout_s_(candidate_timeout_s) {
    // A worker that dies between two requests must not take this process with it.
    ::signal(SIGPIPE, SIG_IGN);
}

WorkerRunner::~WorkerRunner() { stop(); }

const DeviceInfo& WorkerRunner::device() {
    ensure_running();
    if (!info_) info_ = cuda::query_device(device_);
    return *info_;
}

void WorkerRunner::start() {
    int request_pipe[2], answer_pipe[2];
    // Close-on-exec, so that the worker of another GPU, started from another thread, holds no end
    // of these pipes (this worker's end of file would never come).
    if (::pipe2(request_pipe, O_CLOEXEC) != 0) throw Error(fmt::format("tileops-tune: pipe: {}", std::strerror(errno)));
    if (::pipe2(answer_pipe, O_CLOEXEC) != 0) {
        ::close(request_pipe[0]), ::close(request_pipe[1]);
        throw Error(fmt::format("tileops-tune: pipe: {}", std::strerror(errno)));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, request_pipe[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, answer_pipe[1], STDOUT_FILENO);
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigdefault(&attributes, &defaults);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF);
    std::string device = std::to_string(device_);
    char arg0[] = "tileops-tune", arg1[] = "tune-worker", arg2[] = "--device";
    char* argv[] = {arg0, arg1, arg2, device.data(), nullptr};
    const int spawned = ::posix_spawn(&pid_, "/proc/self/exe", &actions, &attributes, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    ::close(request_pipe[0]);
    ::close(answer_pipe[1]);
    to_worker_ = request_pipe[1];
    from_worker_ = answer_pipe[0];
    if (spawned != 0) {
        pid_ = -1;
        close_fd(to_worker_), close_fd(from_worker_);
        throw Error(fmt::format("tileops-tune: cannot start a tuning worker: {}", std::strerror(spawned)));
    }
    pending_.clear();
    if (starts_++ > 0) ++restarts_;
    Reply hello = exchange(nullptr, kSetupSeconds);
    if (!hello.line) throw Error(fmt::format("tileops-tune: the tuning worker for GPU {} did not start: {}", device_, hello.failure));
    if (hello.line->contains("error")) {
        const std::string why = hello.line->at("error").get<std::string>();
        stop();
        throw Error(fmt::format("tileops-tune: the tuning worker for GPU {} did not start: {}", device_, why));
    }
}

void WorkerRunner::stop() {
    if (pid_ < 0) return;
    close_fd(to_worker_);  // end of its requests: it exits
    for (int i = 0; i < 100; ++i) {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            close_fd(from_worker_);
            return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill_worker();
}

void WorkerRunner::kill_worker() {
    if (pid_ < 0) return;
    ::kill(pid_, SIGKILL);
    (void)reap();
}

std::string WorkerRunner::reap() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    close_fd(to_worker_), close_fd(from_worker_);
    if (WIFSIGNALED(status)) return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
    return fmt::format("exited with status {}", WEXITSTATUS(status));
}

WorkerRunner::Reply WorkerRunner::exchange(const json& request, double timeout_s) {
    Reply reply;
    if (!request.is_null() && !write_all(to_worker_, request.dump() + "\n")) {
        reply.failure = fmt::format("the worker process {} before the request", reap());
        return reply;
    }
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    for (;;) {
        if (const size_t newline = pending_.find('\n'); newline != std::string::npos) {
            try {
                reply.line = json::parse(pending_.substr(0, newline));
            } catch (const std::exception& e) {
                kill_worker();
                reply.failure = fmt::format("the worker answered something that is not JSON ({})", e.what());
            }
            pending_.erase(0, newline + 1);
            return reply;
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        pollfd fd{from_worker_, POLLIN, 0};
        const int ready = left > 0 ? ::poll(&fd, 1, static_cast<int>(std::min<long long>(left, 1000))) : 0;
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0) {
            if (left > 1000) continue;
            kill_worker();
            reply.failure = fmt::format("killed by the watchdog: no answer within {:g} s", timeout_s);
            return reply;
        }
        char chunk[65536];
        const ssize_t n = ::read(from_worker_, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            reply.failure = fmt::format("the worker process {}", reap());
            return reply;
        }
        pending_.append(chunk, static_cast<size_t>(n));
        if (pending_.size() > kMaxLineBytes) {
            kill_worker();
            reply.failure = "the worker's answer was too long";
            return reply;
        }
    }
}

// Sends a set-up request (the problem, or the reference) and returns its answer; throws when
// there is none.
json WorkerRunner::setup(const json& request) {
    Reply reply = exchange(request, kSetupSeconds);
    if (!reply.line) throw Error(fmt::format("tileops-tune: setting up {} on GPU {} failed: {}", problem_.dump(), device_, reply.failure));
    if (reply.line->contains("error")) throw Error(reply.line->at("error").get<std::string>());
    return *reply.line;
}

void WorkerRunner::ensure_running() {
    if (pid_ >= 0) return;
    start();
    if (problem_.is_null()) return;
    (void)setup(problem_);
    if (reference_) {
        const json answer = setup({{"measure", *reference_}, {"index", 0}, {"warmup", 0}, {"repeats", 1}});
        if (!answer.value("ok", false))
            throw Error(fmt::format("tileops-tune: the heuristic config failed after a worker restart: {}",
                                    answer.value("failure", std::string())));
    }
}

void WorkerRunner::set_problem(const detail::ProblemSpec& spec, uint64_t seed, tuning::LengthSpread lengths) {
    problem_ = nullptr;
    reference_.reset();
    medians_.clear();
    ensure_running();
    problem_ = {{"problem", {{"op", spec.op}, {"shape", spec.shape}, {"dtype", spec.dtype}, {"flags", spec.flags}}},
                {"seed", seed},
                {"lengths", tuning::length_spread_name(lengths)}};
    const json answer = setup(problem_);
    vector_width_ = answer.at("vector_width").get<int>();
    bytes_moved_ = answer.at("bytes_moved").get<double>();
}

tuning::Measurement WorkerRunner::measure(size_t index, const Config& config, int warmup, int repeats) {
    tuning::Measurement m;
    ensure_running();
    Reply reply = exchange({{"measure", config}, {"index", index}, {"warmup", warmup}, {"repeats", repeats}},
                           candidate_timeout_s_);
    if (!reply.line) {
        m.failure = reply.failure;
    } else if (reply.line->contains("error")) {
        m.failure = reply.line->at("error").get<std::string>();
    } else {
        m.ok = reply.line->at("ok").get<bool>();
        m.failure = reply.line->value("failure", std::string());
        m.median_us = reply.line->value("median_us", 0.0);
        m.spread_us = reply.line->value("spread_us", 0.0);
        if (reply.line->value("context_lost", false)) {
            m.failure += " (it left the worker's context unusable; the worker was restarted)";
            (void)reap();
        }
    }
    if (m.ok) {
        if (index == 0) reference_ = config;
        medians_[config] = m.median_us;
    } else {
        util::logger().debug("tileops-tune: candidate {} ({}) failed: {}", index, tuning::config_text(config), m.failure);
    }
    return m;
}

std::vector<std::vector<double>> WorkerRunner::retime(const std::vector<Config>& configs, int rounds) {
    ensure_running();
    Reply reply = exchange({{"retime", configs}, {"rounds", rounds}}, candidate_timeout_s_ * static_cast<double>(configs.size()));
    if (reply.line && reply.line->contains("samples")) return reply.line->at("samples").get<std::vector<std::vector<double>>>();
    // Every config here has run before: keep its first-pass time rather than lose the problem.
    util::logger().warn("tileops-tune: re-timing the best candidates failed ({}); their first-pass times stand",
                        reply.line ? reply.line->dump() : reply.failure);
    std::vector<std::vector<double>> samples;
    for (const Config& config : configs) samples.emplace_back(static_cast<size_t>(rounds), medians_[config]);
    return samples;
}

}  // namespace tileops::cli
