// The embedded templates, the override directory and the template content hash.
#include <fstream>

#include <catch2/catch_test_macros.hpp>

#include "jit/template_registry.hpp"
#include "support/test_support.hpp"
#include "tileops/error.hpp"

using namespace tileops;

TEST_CASE("every op template and the shared headers are embedded", "[templates]") {
    jit::TemplateRegistry registry;
    for (const char* path : {"rows/rmsnorm.cuh", "rows/layernorm.cuh", "rows/softmax.cuh", "elementwise/elementwise.cuh"}) {
        INFO(path);
        CHECK(registry.file(path).content.find("__global__") != std::string::npos);
    }
    bool has_common = false;
    for (const auto& f : registry.files()) has_common |= f.path.rfind("common/", 0) == 0;
    CHECK(has_common);
    CHECK_THROWS_AS(registry.file("no_such.cuh"), Error);
}

TEST_CASE("a template directory overrides the embedded templates and changes the hash", "[templates]") {
    test::TempDir dir;
    jit::TemplateRegistry embedded;
    std::filesystem::create_directories(dir.path() / "common");
    for (const auto& f : embedded.files()) {
        std::filesystem::create_directories((dir.path() / f.path).parent_path());
        std::ofstream(dir.path() / f.path) << f.content;
    }
    jit::TemplateRegistry copy(dir.path().string());
    CHECK(copy.template_hash("rows/softmax.cuh") == embedded.template_hash("rows/softmax.cuh"));

    std::ofstream(dir.path() / "common" / "types.cuh", std::ios::app) << "\n// edited\n";
    jit::TemplateRegistry edited(dir.path().string());
    // A shared header is part of the hash of every op that includes it; an op's own file only of its own.
    CHECK(edited.template_hash("rows/softmax.cuh") != embedded.template_hash("rows/softmax.cuh"));
    CHECK(edited.template_hash("elementwise/elementwise.cuh") != embedded.template_hash("elementwise/elementwise.cuh"));
    // common/math.cuh is included by the elementwise template only.
    std::ofstream(dir.path() / "common" / "math.cuh", std::ios::app) << "\n// edited\n";
    jit::TemplateRegistry edited_math(dir.path().string());
    CHECK(edited_math.template_hash("elementwise/elementwise.cuh") != edited.template_hash("elementwise/elementwise.cuh"));
    CHECK(edited_math.template_hash("rows/softmax.cuh") == edited.template_hash("rows/softmax.cuh"));
    std::ofstream(dir.path() / "rows/rmsnorm.cuh", std::ios::app) << "\n// edited\n";
    jit::TemplateRegistry edited2(dir.path().string());
    CHECK(edited2.template_hash("rows/rmsnorm.cuh") != edited.template_hash("rows/rmsnorm.cuh"));
    CHECK(edited2.template_hash("rows/softmax.cuh") == edited.template_hash("rows/softmax.cuh"));

    CHECK_THROWS_AS(jit::TemplateRegistry((dir.path() / "missing").string()), FileError);
}
