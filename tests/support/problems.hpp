// A representative set of problems for every op: the shapes, dtypes and options the CPU compile
// tests and tileops-tune warm cover.
#pragma once

#include <memory>
#include <vector>

#include "tileops/tileops.hpp"

namespace tileops::test {

std::vector<std::unique_ptr<Op>> representative_ops();

}  // namespace tileops::test
