#include "tileops_tune/output.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

namespace tileops::cli {

bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

Progress::Progress(bool enabled) : enabled_(enabled) {}

Progress::~Progress() { done(); }

void Progress::update(const std::string& label, double fraction) {
    if (!enabled_) return;
    const int width = 30;
    const int filled = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * width);
    fmt::print(stderr, "\r[{}{}] {:3.0f}% {:<50.50}", std::string(filled, '#'), std::string(width - filled, '.'),
               100 * fraction, label);
    std::fflush(stderr);
    drawn_ = true;
}

void Progress::done() {
    if (enabled_ && drawn_) fmt::print(stderr, "\r{:<90}\r", "");
    drawn_ = false;
}

void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
    std::vector<size_t> widths(header.size());
    for (size_t c = 0; c < header.size(); ++c) widths[c] = header[c].size();
    for (const auto& row : rows)
        for (size_t c = 0; c < row.size() && c < widths.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
    auto print_row = [&](const std::vector<std::string>& row) {
        std::string line;
        for (size_t c = 0; c < row.size(); ++c) line += fmt::format("{:<{}}  ", row[c], widths[c]);
        while (!line.empty() && line.back() == ' ') line.pop_back();
        fmt::print("{}\n", line);
    };
    print_row(header);
    for (const auto& row : rows) print_row(row);
}

}  // namespace tileops::cli
