// The shipped tuning databases (tuning_db/*.json) were tuned with the kernel templates as they are
// now: an edit to the template an entry's config selects, or to what it includes (even a
// comment), changes its content hash, and the runtime then ignores the entry as stale, silently
// falling back to the heuristic. No GPU needed.
#include <catch2/catch_test_macros.hpp>

#include "core/op_model.hpp"
#include "tileops/device_info.hpp"
#include "support/shipped_db.hpp"
#include "tuning/op_config.hpp"

using namespace tileops;

TEST_CASE("every entry of the shipped tuning databases matches the current kernel templates", "[tuning]") {
    int checked = 0;
    for (const test::ShippedEntry& shipped : test::shipped_entries()) {
        const auto op = test::op_for(shipped.entry.key);
        INFO(shipped.file << ": " << op->describe());
        const DeviceInfo device = DeviceInfo::for_arch(shipped.entry.key.arch);
        CHECK(shipped.entry.key.template_hash == tuning::kernel_template_hash(op->model(), shipped.entry.config, device));
        ++checked;
    }
    CHECK(checked > 0);
}
