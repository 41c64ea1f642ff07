#include "jit/kernel_builder.hpp"

#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "jit/compiler.hpp"
#include "jit/cuda_headers.hpp"
#include "jit/template_registry.hpp"
#include "tileops/error.hpp"
#include "util/log.hpp"
#include "util/sha256.hpp"

namespace tileops::jit {
namespace {

// A cache entry's payload: the hash of the CUDA headers it was compiled against, the kernel's
// symbol, then the cubin, the first two on a line each.
std::string encode_payload(const std::string& headers_hash, const std::string& lowered_name, const std::string& cubin) {
    return headers_hash + '\n' + lowered_name + '\n' + cubin;
}

bool decode_payload(const std::string& payload, KernelBinary& binary, std::string& headers_hash) {
    const size_t first = payload.find('\n');
    if (first == std::string::npos || first == 0) return false;
    const size_t second = payload.find('\n', first + 1);
    if (second == std::string::npos || second == first + 1 || second + 1 >= payload.size()) return false;
    headers_hash = payload.substr(0, first);
    binary.lowered_name = payload.substr(first + 1, second - first - 1);
    binary.cubin = payload.substr(second + 1);
    return true;
}

}  // namespace

KernelBuilder::KernelBuilder(const std::filesystem::path& cache_dir, uint64_t max_bytes, bool allow_compile)
    : KernelBuilder(cache_dir, max_bytes, JitPolicy{allow_compile ? JitMode::on : JitMode::off, {}}) {}

KernelBuilder::KernelBuilder(const std::filesystem::path& cache_dir, uint64_t max_bytes, JitPolicy policy)
    : cache_(cache_dir, max_bytes), policy_(std::move(policy)) {}

void KernelBuilder::record_miss(const MissedKernel& kernel) {
    if (!misses_.first_time(kernel)) return;
    util::logger().warn("tileops: kernel {} for {} was not in the kernel cache {}; compiling it on the request path "
                        "(TILEOPS_JIT=warn) and recording it in {}",
                        kernel.name_expression, kernel.arch, cache_.directory().string(), policy_.manifest.string());
    try {
        append_to_manifest(policy_.manifest, kernel);
    } catch (const FileError& e) {
        util::logger().warn("{}", e.what());
    }
}

std::string kernel_cache_key(const KernelKeyInputs& inputs) {
    return util::Sha256()
        .field("tileops-kernel-v2")  // v2: payloads record the CUDA headers they were compiled against
        .field(inputs.translation_unit)
        .field(inputs.template_hash)
        .field(inputs.name_expression)
        .field(inputs.options)
        .field(inputs.nvrtc_version)
        .field(inputs.arch)
        .hex_digest();
}

std::string KernelBuilder::cache_key(const std::string& template_file, const std::string& name_expression,
                                     const std::string& arch) const {
    KernelKeyInputs inputs;
    inputs.translation_unit = jit::render_translation_unit(template_file);
    inputs.template_hash = jit::TemplateRegistry::instance().template_hash(template_file);
    inputs.name_expression = name_expression;
    inputs.options = fmt::format("{}", fmt::join(base_compile_options(arch), " "));
    inputs.nvrtc_version = nvrtc_version();
    inputs.arch = arch;
    return kernel_cache_key(inputs);
}

std::optional<KernelBinary> KernelBuilder::from_bundle(const std::string& key, const std::string& name_expression,
                                                      const std::string& arch) {
    if (bundle_ == nullptr) return std::nullopt;
    std::optional<std::string> payload = bundle_->kernel(key);
    if (!payload) return std::nullopt;
    KernelBinary binary;
    std::string built_with;
    const std::string* headers = cuda_headers_hash_if_found();
    if (decode_payload(*payload, binary, built_with) && (headers == nullptr || built_with == *headers)) {
        bundle_hits_.fetch_add(1);
        util::logger().debug("tileops: loaded {} for {} from the bundle", name_expression, arch);
        return binary;
    }
    util::logger().debug("tileops: the bundle's {} for {} was compiled against other CUDA headers", name_expression, arch);
    return std::nullopt;
}

std::optional<KernelBinary> KernelBuilder::find(const std::string& template_file, const std::string& name_expression,
                                                const std::string& arch) {
    const std::string key = cache_key(template_file, name_expression, arch);
    if (std::optional<KernelBinary> bundled = from_bundle(key, name_expression, arch)) return bundled;
    std::optional<std::string> payload = cache_.load(key);
    if (!payload) return std::nullopt;
    KernelBinary binary;
    std::string built_with;
    const std::string* headers = cuda_headers_hash_if_found();
    if (!decode_payload(*payload, binary, built_with) || (headers != nullptr && built_with != *headers))
        return std::nullopt;  // get() rebuilds it
    disk_hits_.fetch_add(1);
    util::logger().debug("tileops: loaded {} for {} from the disk cache", name_expression, arch);
    return binary;
}

KernelBinary KernelBuilder::get(const std::string& template_file, const std::string& name_expression,
                                const std::string& arch) {
    const std::string key = cache_key(template_file, name_expression, arch);
    if (std::optional<KernelBinary> bundled = from_bundle(key, name_expression, arch)) return *bundled;
    bool built = false;
    auto build = [&]() -> std::string {
        if (policy_.mode == JitMode::off)
            throw CacheMiss(fmt::format("tileops: kernel {} for {} is not in the cache {} and compiling is "
                                        "disabled (TILEOPS_JIT=off, TILEOPS_NO_COMPILE or "
                                        "RuntimeOptions::allow_compile); fill the cache with `tileops-tune warm` "
                                        "(TILEOPS_JIT=warn records what a workload misses, for warm --manifest)",
                                        name_expression, arch, cache_.directory().string()));
        if (policy_.mode == JitMode::warn) record_miss({template_file, name_expression, arch});
        CompileResult result = compile(jit::compile_request(template_file, {name_expression}, arch));
        util::logger().debug("tileops: compiled {} for {} in {:.0f} ms", name_expression, arch, result.milliseconds);
        if (!result.log.empty()) util::logger().debug("tileops: NVRTC log for {}:\n{}", name_expression, result.log);
        const std::string* headers = cuda_headers_hash_if_found();  // found: compile() found them too
        return encode_payload(headers ? *headers : "unknown", result.lowered_names.at(name_expression), result.cubin);
    };
    std::string payload;
    if (policy_.mode == JitMode::off) {
        // A plain look-up: a miss touches nothing, no lock file, no directory (the cache may sit
        // on a read-only image); build() raises the CacheMiss.
        std::optional<std::string> hit = cache_.load(key);
        payload = hit ? std::move(*hit) : build();
    } else {
        payload = cache_.get_or_build(key, build, &built);
    }
    KernelBinary binary;
    std::string built_with;
    const std::string* headers = built ? nullptr : cuda_headers_hash_if_found();
    const bool ours = decode_payload(payload, binary, built_with);
    if (!ours || (headers != nullptr && built_with != *headers)) {
        // A payload that passed the cache's checksum but is not ours, or a kernel compiled against
        // other CUDA headers than the ones here: rebuild and overwrite it.
        if (!allow_compile() && ours)
            throw CacheMiss(fmt::format("tileops: the cached kernel {} for {} in {} was compiled against other CUDA "
                                        "headers than those in {}, and compiling is disabled; warm the cache with "
                                        "this toolkit",
                                        name_expression, arch, cache_.directory().string(), cuda_include_dirs().front()));
        util::logger().warn("tileops: cache entry {} {}; rebuilding", key,
                            ours ? "was compiled against other CUDA headers" : "has an unexpected payload");
        payload = build();
        built = true;
        cache_.store_if_writable(key, payload);  // a read-only cache still runs what was just built
        decode_payload(payload, binary, built_with);
    }
    binary.compiled = built;
    if (built) {
        compiled_.fetch_add(1);
    } else {
        disk_hits_.fetch_add(1);
        util::logger().debug("tileops: loaded {} for {} from the disk cache", name_expression, arch);
    }
    return binary;
}

}  // namespace tileops::jit
