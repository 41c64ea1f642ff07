// The order in which many kernels are compiled at once: the costliest first.
//
// A warm on many cores ends when its last compile does. Compiled in name order, a two-second
// kernel (MLA decode, sampling) could start when the other cores had nothing left to do:
// replaying the per-kernel times of a warm (303 kernels, shipped database + Llama-3-8B workload)
// over 16 workers, name order ends at 1.63x the ideal time, the costliest first at 1.01x.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>
#include <vector>

namespace tileops::jit {

// Roughly what NVRTC takes for this kernel on one core, in milliseconds. Only an ordering hint:
// measured per kernel function, a kernel nobody measured gets a figure by its family.
double expected_compile_ms(std::string_view template_file, std::string_view name_expression);

// The kernel functions whose compile time was measured (so that a test can tell when one is renamed).
std::vector<std::string_view> measured_kernel_functions();

// The indices 0..n-1, by cost(i) from the highest down; equal costs keep their order.
std::vector<size_t> costliest_first(size_t n, const std::function<double(size_t)>& cost);

// What names a kernel to expected_compile_ms.
struct KernelRef {
    std::string_view template_file, name_expression;
};

// Calls build(i) for every i in 0..n-1 on `threads` threads (0: every core), the kernels that take
// longest to compile first; kernel(i) names kernel i.
void for_each_costliest_first(size_t n, size_t threads, const std::function<KernelRef(size_t)>& kernel,
                              const std::function<void(size_t)>& build);

}  // namespace tileops::jit
