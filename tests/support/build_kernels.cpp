#include "support/build_kernels.hpp"

#include <string>

#include <catch2/catch_test_macros.hpp>

#include "runtime/runtime_impl.hpp"
#include "util/parallel_for.hpp"

namespace tileops::test {

void build_kernels(Runtime& runtime, const std::vector<detail::LaunchPlan>& plans) {
    detail::RuntimeImpl& impl = runtime.impl();
    std::vector<std::string> errors(plans.size());
    util::parallel_for_chunks(plans.size(), 1, [&](size_t, size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) try {
                for (const std::string& name : plans[i].name_expressions())
                    impl.builder().get(plans[i].template_file, name, runtime.device().arch());
            } catch (const std::exception& e) {
                errors[i] = e.what();
            }
    });
    for (const std::string& error : errors) CHECK(error.empty());
}

}  // namespace tileops::test
