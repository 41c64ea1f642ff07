#include "support/shipped_db.hpp"

#include <filesystem>

#include <catch2/catch_test_macros.hpp>

#include "ops/registry.hpp"

namespace tileops::test {

std::vector<ShippedEntry> shipped_entries() {
    const std::filesystem::path dir = std::filesystem::path(TILEOPS_TEST_SOURCE_DIR) / "tuning_db";
    std::vector<ShippedEntry> entries;
    for (const auto& file : std::filesystem::directory_iterator(dir)) {
        if (file.path().extension() != ".json") continue;
        const TuningDb db = TuningDb::load(file.path());
        INFO(file.path().string());
        REQUIRE(db.rejected().empty());
        for (const TuningEntry& e : db.entries()) entries.push_back({file.path().filename().string(), e});
    }
    return entries;
}

std::unique_ptr<Op> op_for(const TuningKey& key) { return detail::make_op({key.op, key.shape, key.dtype, key.flags}); }

}  // namespace tileops::test
