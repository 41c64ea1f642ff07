// What the CUDA headers contribute to a kernel: the content of every toolkit header the templates
// include, transitively, as one hash. Each cache entry records the hash it was compiled with, and
// a process that has the headers rebuilds an entry compiled against others (say by a warm with
// another, or altered, CUDA_HOME) instead of running it. A process without the headers (a serving
// image holding a warm cache) cannot compile or check, and runs what the cache holds.
#pragma once

#include <string>
#include <vector>

namespace tileops::jit {

// The hash of the CUDA headers the kernel templates include (`#include <...>`), followed through
// their own includes, found in cuda_include_dirs(); null when no toolkit headers are found.
// Computed once per process, on first use (CUDA 13: about 100 files, 2 MB, ~10 ms).
const std::string* cuda_headers_hash_if_found();

// The hash of the headers `roots` name and of everything they include, resolved as a compiler
// would (a quoted name beside the including file first, then `include_dirs` in order; names found
// nowhere, such as the C library's, are left out). Each file counts with its name and content.
// `files`, when given, receives how many files were hashed.
std::string headers_closure_hash(const std::vector<std::string>& roots, const std::vector<std::string>& include_dirs,
                                 size_t* files = nullptr);

}  // namespace tileops::jit
