// The NVRTC wrapper: compiles for any arch without a GPU, reports failures with their log.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <atomic>
#include <thread>

#include "jit/compiler.hpp"
#include "tileops/error.hpp"

using namespace tileops;
using Catch::Matchers::ContainsSubstring;

namespace {

jit::CompileRequest tiny(const std::string& arch) {
    jit::CompileRequest request;
    request.source = "#include \"scale.cuh\"\n";
    request.source_name = "scale.cu";
    request.headers = {{"scale.cuh", "#include <cuda_bf16.h>\nnamespace t { template <int N> __global__ void scale(float* x) "
                                     "{ x[threadIdx.x] *= N; } }\n"}};
    request.name_expressions = {"t::scale<3>"};
    request.arch = arch;
    return request;
}

}  // namespace

TEST_CASE("NVRTC compiles a template instance for several archs without a GPU", "[compiler]") {
    for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90a"}) {
        INFO(arch);
        jit::CompileResult result = jit::compile(tiny(arch));
        CHECK(result.cubin.size() > 100);
        CHECK(result.lowered_names.at("t::scale<3>").find("scale") != std::string::npos);
    }
    CHECK(jit::nvrtc_version().find('.') != std::string::npos);
}

TEST_CASE("a failed compilation throws CompileError with the log", "[compiler]") {
    jit::CompileRequest request = tiny("sm_80");
    request.headers[0].second += "this is not C++;\n";
    try {
        jit::compile(request);
        FAIL("expected CompileError");
    } catch (const CompileError& e) {
        CHECK_THAT(e.log(), ContainsSubstring("scale.cuh"));
        CHECK_THAT(std::string(e.what()), ContainsSubstring("sm_80"));
    }
}

TEST_CASE("unsupported archs are refused by name", "[compiler]") {
    CHECK_NOTHROW(jit::check_arch_supported("sm_90a"));
    CHECK_THROWS_WITH(jit::check_arch_supported("sm_12"), ContainsSubstring("sm_12"));
    CHECK_THROWS_AS(jit::check_arch_supported("gfx90a"), Unsupported);
}

TEST_CASE("compiles run in parallel from several threads", "[compiler]") {
    std::vector<std::thread> threads;
    std::atomic<int> ok{0};
    for (int i = 0; i < 4; ++i)
        threads.emplace_back([&] {
            if (!jit::compile(tiny("sm_90a")).cubin.empty()) ++ok;
        });
    for (auto& t : threads) t.join();
    CHECK(ok == 4);
}
