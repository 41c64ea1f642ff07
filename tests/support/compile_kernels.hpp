// Compiles many kernel instantiations with NVRTC on every core: the compile tests' shared driver.
#pragma once

#include <map>
#include <set>
#include <string>

namespace tileops::test {

// Compiles every name expression of every template file for `arch`, a few NVRTC programs per file
// at once (one per core), and CHECKs that each program compiled and lowered all its names.
void compile_all(const std::map<std::string, std::set<std::string>>& kernels, const std::string& arch);

}  // namespace tileops::test
