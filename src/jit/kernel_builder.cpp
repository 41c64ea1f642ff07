#include "jit/kernel_builder.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "jit/compiler.hpp"
#include "jit/template_registry.hpp"
#include "tileops/error.hpp"
#include "util/log.hpp"
#include "util/sha256.hpp"

namespace tileops::jit {
namespace {

// The disk cache stores one payload per key: the lowered kernel name, a newline, the cubin.
std::string encode_payload(const std::string& lowered_name, const std::string& cubin) {
    return lowered_name + '\n' + cubin;
}

bool decode_payload(const std::string& payload, KernelBinary& binary) {
    size_t newline = payload.find('\n');
    if (newline == std::string::npos || newline == 0 || newline + 1 >= payload.size()) return false;
    binary.lowered_name = payload.substr(0, newline);
    binary.cubin = payload.substr(newline + 1);
    return true;
}

}  // namespace

KernelBuilder::KernelBuilder(const std::filesystem::path& cache_dir, uint64_t max_bytes, bool allow_compile)
    : cache_(cache_dir, max_bytes), allow_compile_(allow_compile) {}

std::string kernel_cache_key(const KernelKeyInputs& inputs) {
    return util::Sha256()
        .field("tileops-kernel-v1")
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

KernelBinary KernelBuilder::get(const std::string& template_file, const std::string& name_expression,
                                const std::string& arch) {
    const std::string key = cache_key(template_file, name_expression, arch);
    bool built = false;
    auto build = [&]() -> std::string {
        if (!allow_compile_)
            throw CacheMiss(fmt::format("tileops: kernel {} for {} is not in the cache {} and compiling is "
                                        "disabled (TILEOPS_NO_COMPILE or RuntimeOptions::allow_compile); "
                                        "fill the cache with `tileops-tune warm`",
                                        name_expression, arch, cache_.directory().string()));
        CompileResult result = compile(jit::compile_request(template_file, {name_expression}, arch));
        util::logger().debug("tileops: compiled {} for {} in {:.0f} ms", name_expression, arch, result.milliseconds);
        if (!result.log.empty()) util::logger().debug("tileops: NVRTC log for {}:\n{}", name_expression, result.log);
        return encode_payload(result.lowered_names.at(name_expression), result.cubin);
    };
    std::string payload = cache_.get_or_build(key, build, &built);
    KernelBinary binary;
    if (!decode_payload(payload, binary)) {
        // A payload that passed the cache's checksum but is not ours: rebuild and overwrite it.
        util::logger().warn("tileops: cache entry {} has an unexpected payload; rebuilding", key);
        payload = build();
        built = true;
        cache_.store(key, payload);
        decode_payload(payload, binary);
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
