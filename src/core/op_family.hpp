// An op family as the registry (ops/registry.hpp) lists it: the ops it names, how each is built
// from a textual problem, and problems that cover its kernels. The factory, the CLI help, the
// compile tests and tileops-tune iterate these; nothing else lists ops by hand.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/problem_spec.hpp"
#include "tileops/op.hpp"

namespace tileops::detail {

struct OpKind {
    std::string name;   // "rmsnorm": the op in tuning keys, workload files and the CLI
    std::string shape;  // its dimensions, for help and errors: "rows x cols"
    std::string flags;  // its options, for help: "residual"; "" when it has none
    std::unique_ptr<Op> (*make)(const ProblemSpec& spec);  // throws InvalidArgument naming what is wrong
};

struct OpFamily {
    std::string name;  // "rows": its folder under src/ops/ and kernel_templates/
    std::vector<OpKind> ops;
    // Problems that between them select every kernel variant of the family: the CPU compile tests
    // and tileops-tune's examples use them.
    std::vector<std::unique_ptr<Op>> (*representative_ops)();
};

}  // namespace tileops::detail
