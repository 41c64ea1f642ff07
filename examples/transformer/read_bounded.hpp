// Reading a small file the user named (a model config), refusing what is not a regular file of
// bounded size: a FIFO would block, /dev/zero would never end.
#pragma once

#include <cstddef>
#include <string>

namespace transformer {

// The file's bytes; throws std::invalid_argument naming `path` and `what` it was meant to be.
std::string read_bounded(const std::string& path, size_t max_bytes, const char* what);

}  // namespace transformer
