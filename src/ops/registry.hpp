// The registry of op families: the one list of the ops this library has. make_op (what
// tileops-tune and tuning database keys build ops with), known_ops, the CLI help and the tests'
// problem lists all come from it. Adding a family is one line in registry.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/op_family.hpp"
#include "core/problem_spec.hpp"

namespace tileops::detail {

// Every family, in a fixed order.
const std::vector<OpFamily>& op_families();

// The op named `name`, or null when no family has it.
const OpKind* find_op_kind(const std::string& name);

// Builds the op of `spec`. Throws InvalidArgument naming what is wrong (unknown op, bad shape,
// bad dtype, unknown flag).
std::unique_ptr<Op> make_op(const ProblemSpec& spec);

// Every op name make_op accepts, family by family.
const std::vector<std::string>& known_ops();

// Problems covering every kernel variant of every family (the families' representative_ops).
std::vector<std::unique_ptr<Op>> representative_ops();

}  // namespace tileops::detail
