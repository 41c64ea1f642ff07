// The shipped tuning databases (tuning_db/*.json) were tuned with the kernel templates as they are
// now: an edit to a template (even a comment) changes its content hash, and the runtime then
// ignores the entry as stale, silently falling back to the heuristic. No GPU needed.
#include <filesystem>
#include <fstream>

#include <catch2/catch_test_macros.hpp>
#include <nlohmann/json.hpp>

#include "ops/op_factory.hpp"
#include "ops/op_model.hpp"
#include "tuning/op_config.hpp"

using namespace tileops;

TEST_CASE("every entry of the shipped tuning databases matches the current kernel templates", "[tuning]") {
    const std::filesystem::path dir = std::filesystem::path(TILEOPS_TEST_SOURCE_DIR) / "tuning_db";
    int checked = 0;
    for (const auto& file : std::filesystem::directory_iterator(dir)) {
        if (file.path().extension() != ".json") continue;
        std::ifstream in(file.path());
        const nlohmann::json db = nlohmann::json::parse(in);
        for (const nlohmann::json& e : db.at("entries")) {
            const auto op = detail::make_op({e.at("op").get<std::string>(), e.at("shape").get<std::vector<long long>>(),
                                             e.at("dtype").get<std::string>(), e.value("flags", std::string())});
            INFO(file.path().filename().string() << ": " << op->describe());
            CHECK(e.at("template_hash").get<std::string>() == tuning::current_template_hash(op->model()));
            ++checked;
        }
    }
    CHECK(checked > 0);
}
