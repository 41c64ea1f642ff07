#include "read_bounded.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <fmt/format.h>

namespace transformer {

std::string read_bounded(const std::string& path, size_t max_bytes, const char* what) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (ec) throw std::invalid_argument(fmt::format("{}: cannot read the {}: {}", path, what, ec.message()));
    if (!std::filesystem::is_regular_file(status))
        throw std::invalid_argument(fmt::format("{}: the {} is not a regular file", path, what));
    const auto size = std::filesystem::file_size(path, ec);
    if (ec || size > max_bytes)
        throw std::invalid_argument(fmt::format("{}: the {} is larger than {} bytes", path, what, max_bytes));
    std::ifstream in(path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) throw std::invalid_argument(fmt::format("{}: cannot read the {}", path, what));
    if (text.size() > max_bytes)
        throw std::invalid_argument(fmt::format("{}: the {} is larger than {} bytes", path, what, max_bytes));
    return text;
}

}  // namespace transformer
