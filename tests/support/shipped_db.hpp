// The shipped tuning databases (tuning_db/*.json in the source tree), loaded with the library's
// own loader, for the tests that check what ships.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tileops/op.hpp"
#include "tileops/tuning_db.hpp"

namespace tileops::test {

struct ShippedEntry {
    std::string file;  // e.g. "h100-sxm.json"
    TuningEntry entry;
};

// Every entry of every shipped database; REQUIREs that each file loads without rejected entries.
std::vector<ShippedEntry> shipped_entries();

// The op an entry's key describes (op, shape, dtype, flags).
std::unique_ptr<Op> op_for(const TuningKey& key);

}  // namespace tileops::test
