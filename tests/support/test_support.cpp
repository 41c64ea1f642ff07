#include "support/test_support.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>

#include "cuda/device.hpp"
#include "util/host_dtype.hpp"

namespace tileops::test {
namespace fs = std::filesystem;

Runtime& shared_runtime() {
    static Runtime runtime;
    return runtime;
}

bool have_gpu() { return cuda::device_count() > 0; }

TempDir::TempDir() {
    static std::atomic<int> counter{0};
    std::random_device entropy;
    path_ = fs::temp_directory_path() /
            ("tileops-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
             std::to_string(entropy()));
    fs::create_directories(path_);
}

TempDir::~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
}

Shard test_shard(const char* variable) {
    const char* value = std::getenv(variable);
    if (value == nullptr || *value == '\0') return {};
    const std::string text = value;
    const size_t slash = text.find('/');
    auto number = [&](const std::string& part) {
        if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos || part.size() > 6)
            throw std::invalid_argument(std::string(variable) + "='" + text + "' is not i/n with 0 <= i < n");
        return static_cast<size_t>(std::stoul(part));
    };
    if (slash == std::string::npos) number("");
    Shard shard{number(text.substr(0, slash)), number(text.substr(slash + 1))};
    if (shard.count == 0 || shard.index >= shard.count)
        throw std::invalid_argument(std::string(variable) + "='" + text + "' is not i/n with 0 <= i < n");
    return shard;
}

ScopedEnv::ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    had_old_ = old != nullptr;
    if (had_old_) old_ = old;
    ::setenv(name, value.c_str(), 1);
}

ScopedEnv::~ScopedEnv() {
    if (had_old_)
        ::setenv(name_.c_str(), old_.c_str(), 1);
    else
        ::unsetenv(name_.c_str());
}

std::vector<uint8_t> encode(DType dtype, const std::vector<double>& values) {
    const size_t element = dtype_size(dtype);
    std::vector<uint8_t> bytes(values.size() * element);
    for (size_t i = 0; i < values.size(); ++i) util::encode_value(dtype, static_cast<float>(values[i]), &bytes[i * element]);
    return bytes;
}

std::vector<double> decode(DType dtype, const std::vector<uint8_t>& bytes) {
    const size_t element = dtype_size(dtype);
    std::vector<double> values(bytes.size() / element);
    for (size_t i = 0; i < values.size(); ++i) values[i] = util::decode_value(dtype, &bytes[i * element]);
    return values;
}

std::vector<double> round_to(DType dtype, const std::vector<double>& values) { return decode(dtype, encode(dtype, values)); }

std::vector<double> random_values(size_t count, uint64_t seed, double lo, double hi) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<double> values(count);
    for (double& v : values) v = dist(rng);
    return values;
}

double relative_error(const std::vector<double>& out, const std::vector<double>& ref) {
    if (out.size() != ref.size()) return INFINITY;
    double diff = 0, norm = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        if (!std::isfinite(out[i]) && !(std::isinf(out[i]) && out[i] == ref[i])) return INFINITY;
        if (std::isinf(ref[i])) continue;
        diff += (out[i] - ref[i]) * (out[i] - ref[i]);
        norm += ref[i] * ref[i];
    }
    return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

double tolerance(DType dtype) {
    switch (dtype) {
        case DType::fp32: return 1e-5;
        case DType::fp16: return 1e-3;
        case DType::bf16: return 1.6e-2;
        case DType::int32: return 0;
        case DType::fp8_e4m3: return 6.25e-2;  // 3 mantissa bits
    }
    return 0;
}

std::vector<size_t> elements_off(const std::vector<double>& out, const std::vector<double>& ref, DType dtype) {
    double tol = tolerance(dtype), smallest = 0;
    switch (dtype) {
        case DType::fp32: smallest = std::ldexp(1.0, -149); break;
        case DType::fp16: smallest = std::ldexp(1.0, -24), tol = std::max(tol, std::ldexp(1.0, -10)); break;
        case DType::bf16: smallest = std::ldexp(1.0, -133), tol = std::max(tol, std::ldexp(1.0, -7)); break;
        case DType::fp8_e4m3: smallest = std::ldexp(1.0, -9), tol = std::max(tol, std::ldexp(1.0, -3)); break;
        case DType::int32: break;
    }
    double sum = 0;
    size_t finite = 0;
    for (double r : ref)
        if (std::isfinite(r)) sum += r * r, ++finite;
    // An all-zero reference (log-softmax of one-element rows) has no scale of its own: then the
    // errors count absolutely, as in relative_error.
    const double rms = finite > 0 ? std::sqrt(sum / static_cast<double>(finite)) : 0.0;
    const double floor = tol * (rms > 0 ? rms : 1.0) + smallest;
    std::vector<size_t> off;
    for (size_t i = 0; i < std::min(out.size(), ref.size()); ++i) {
        if (std::isinf(ref[i])) {
            if (out[i] != ref[i]) off.push_back(i);
            continue;
        }
        if (!(std::abs(out[i] - ref[i]) <= tol * std::abs(ref[i]) + floor)) off.push_back(i);
    }
    return off;
}

int run_self(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env) {
    pid_t pid = ::fork();
    if (pid == 0) {
        for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
        std::vector<char*> argv;
        std::string self = "/proc/self/exe";
        argv.push_back(self.data());
        std::vector<std::string> copies = args;
        for (std::string& a : copies) argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execv("/proc/self/exe", argv.data());
        ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<double> row_prefixes(const std::vector<double>& stored, int64_t rows, int64_t width, int64_t stride,
                                 bool& gaps_poisoned) {
    std::vector<double> out;
    gaps_poisoned = true;
    for (int64_t row = 0; row < rows; ++row)
        for (int64_t e = 0; e < stride; ++e) {
            const double value = stored.at(static_cast<size_t>(row * stride + e));
            if (e < width) out.push_back(value);
            else gaps_poisoned = gaps_poisoned && std::isnan(value);
        }
    return out;
}

SkewedBatches skewed_batches(int batch, int longest, uint32_t seed) {
    std::mt19937 rng(seed);
    SkewedBatches b;
    b.first.resize(static_cast<size_t>(batch));
    for (int& len : b.first) len = static_cast<int>(rng() % 300);
    b.second = b.first;
    b.first[5] = longest, b.first[9] = 0, b.first[batch - 1] = 10 * longest;
    b.second[5] = 40, b.second[batch - 7] = longest - longest / 12, b.second[0] = -3;
    for (size_t i = 0; i < b.first.size(); ++i)
        b.capacity.push_back(std::clamp(std::max(b.first[i], b.second[i]), 0, longest));
    return b;
}

double lse_error(const std::vector<double>& lse, const std::vector<double>& ref) {
    double worst = lse.size() == ref.size() ? 0.0 : INFINITY;
    for (size_t i = 0; i < std::min(lse.size(), ref.size()); ++i) {
        if (std::isinf(ref[i])) worst = std::max(worst, lse[i] == ref[i] ? 0.0 : INFINITY);
        else worst = std::max(worst, std::abs(lse[i] - ref[i]) / std::max(1.0, std::abs(ref[i])));
    }
    return worst;
}

}  // namespace tileops::test
