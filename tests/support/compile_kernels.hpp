// Compiles many kernel instantiations with NVRTC on every core: the compile tests' shared driver.
#pragma once

#include <map>
#include <set>
#include <string>

#include "core/op_model.hpp"

namespace tileops::test {

// Template file -> the name expressions to compile from it (one NVRTC program per file and core).
using KernelsByFile = std::map<std::string, std::set<std::string>>;

// Adds the kernels a launch of `model` with `config` at vector width `vec` uses (its main kernel
// and its side kernels), under the template file its plan names.
void add_kernels(KernelsByFile& kernels, const detail::OpModel& model, const Config& config, int vec,
                 const DeviceInfo& device);

// Compiles every name expression of every template file for `arch`, a few NVRTC programs per file
// at once (one per core), and CHECKs that each program compiled and lowered all its names. With
// TILEOPS_TEST_COMPILE_SHARD="i/n" only the names at positions i, i + n, ... of each file compile:
// the sanitized suite sets it, since NVRTC runs several times slower under AddressSanitizer's
// allocator and the unsanitized suite compiles every name.
void compile_all(const KernelsByFile& kernels, const std::string& arch);

// What ptxas said about one kernel: bytes of registers spilled to local memory, the static shared
// memory it laid out (what the host must count beside the dynamic bytes), and whether its wgmmas
// were serialized (C7520: the compiler could not keep them asynchronous).
struct PtxasReport {
    int spill_bytes = 0;
    int static_shared_bytes = 0;
    bool wgmma_serialized = false;
};
// The same compilation with ptxas' report: name expression -> what ptxas said about its kernel.
std::map<std::string, PtxasReport> compile_all_with_report(const KernelsByFile& kernels, const std::string& arch);

}  // namespace tileops::test
