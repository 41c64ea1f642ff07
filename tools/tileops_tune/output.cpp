#include "tileops_tune/output.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "tileops/error.hpp"

namespace tileops::cli {

bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

Progress::Progress(Style style) : style_(style), start_(std::chrono::steady_clock::now()), last_line_(start_) {
    if (const char* value = std::getenv("TILEOPS_PROGRESS_SECONDS"); value != nullptr && *value != '\0') {
        char* end = nullptr;
        const double seconds = std::strtod(value, &end);
        if (end == value || *end != '\0' || !(seconds >= 0) || !std::isfinite(seconds))
            throw InvalidArgument(fmt::format("TILEOPS_PROGRESS_SECONDS must be a number of seconds >= 0, got '{}'", value));
        line_seconds_ = seconds;
    }
}

Progress::~Progress() { done(); }

Progress::Style Progress::for_stderr(bool machine_output) {
    if (!stderr_is_terminal()) return Style::lines;
    return machine_output ? Style::off : Style::bar;
}

namespace {

std::string duration(double seconds) {
    if (seconds < 100) return fmt::format("{:.0f} s", seconds);
    return fmt::format("{:.0f} min {:02.0f} s", std::floor(seconds / 60), std::fmod(seconds, 60.0));
}

}  // namespace

void Progress::update(const std::string& label, double fraction) {
    if (style_ == Style::off) return;
    fraction = std::clamp(fraction, 0.0, 1.0);
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    // Too early an estimate swings wildly: none before 2% of the work or 2 seconds.
    const std::string left =
        fraction >= 0.02 && elapsed >= 2 ? ", about " + duration(elapsed * (1 - fraction) / fraction) + " left" : "";
    if (style_ == Style::bar) {
        const int width = 24;
        const int filled = static_cast<int>(fraction * width);
        fmt::print(stderr, "\r[{}{}] {:3.0f}% {}{}  {:<60.60}", std::string(filled, '#'), std::string(width - filled, '.'),
                   100 * fraction, duration(elapsed), left, label);
        std::fflush(stderr);
        drawn_ = true;
        return;
    }
    if (std::chrono::duration<double>(now - last_line_).count() < line_seconds_) return;
    last_line_ = now;
    fmt::print(stderr, "{:.0f}% after {}{}: {}\n", 100 * fraction, duration(elapsed), left, label);
    std::fflush(stderr);
}

void Progress::done() {
    if (style_ == Style::bar && drawn_) fmt::print(stderr, "\r{:<140}\r", "");
    drawn_ = false;
}

void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                 std::optional<ShrinkColumn> shrink) {
    std::vector<size_t> widths(header.size());
    for (size_t c = 0; c < header.size(); ++c) widths[c] = header[c].size();
    for (const auto& row : rows)
        for (size_t c = 0; c < row.size() && c < widths.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
    if (shrink && shrink->column < widths.size()) {
        size_t line = 2 * (widths.size() - 1);
        for (size_t width : widths) line += width;
        size_t& width = widths[shrink->column];
        const size_t narrowest = std::max<size_t>(header[shrink->column].size(), 4);  // room for "x..."
        if (line > shrink->max_width) width = std::max(narrowest, width - std::min(width, line - shrink->max_width));
    }
    auto cell = [&](const std::string& text, size_t c) {
        if (!shrink || c != shrink->column || text.size() <= widths[c]) return text;
        return text.substr(0, widths[c] - 3) + "...";
    };
    auto print_row = [&](const std::vector<std::string>& row) {
        std::string line;
        for (size_t c = 0; c < row.size(); ++c) line += fmt::format("{:<{}}  ", cell(row[c], c), widths[c]);
        while (!line.empty() && line.back() == ' ') line.pop_back();
        fmt::print("{}\n", line);
    };
    print_row(header);
    for (const auto& row : rows) print_row(row);
}

}  // namespace tileops::cli
