// Terminal output for tileops-tune: progress on stderr and plain tables.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace tileops::cli {

// Progress of a long piece of work on stderr, with the time spent and an estimate of what is left:
// a bar redrawn in place on a terminal; elsewhere (CI, container logs) a plain line every
// TILEOPS_PROGRESS_SECONDS seconds (default 10; 0: every update).
class Progress {
public:
    enum class Style { off, bar, lines };
    explicit Progress(Style style);
    ~Progress();
    // The style for stderr: a bar on a terminal (unless `machine_output`, whose consumer reads
    // stdout), lines otherwise.
    static Style for_stderr(bool machine_output);
    void update(const std::string& label, double fraction);
    void done();

private:
    Style style_;
    std::chrono::steady_clock::time_point start_, last_line_;
    double line_seconds_ = 10;
    bool drawn_ = false;
};

// True when stderr is a terminal (and NO_COLOR-style quiet is not requested).
bool stderr_is_terminal();

// A column that gives way: its cells are cut ("..." marking the cut) so that a line of the table
// stays within `max_width` characters, as far as the other columns leave it its header's width.
struct ShrinkColumn {
    size_t column;
    size_t max_width;
};

// Prints rows as an aligned table with a header.
void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                 std::optional<ShrinkColumn> shrink = std::nullopt);

}  // namespace tileops::cli
