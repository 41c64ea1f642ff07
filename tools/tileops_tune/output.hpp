// Terminal output for tileops-tune: a progress bar on stderr (only when it is a terminal) and
// plain tables.
#pragma once

#include <string>
#include <vector>

namespace tileops::cli {

class Progress {
public:
    explicit Progress(bool enabled);
    ~Progress();
    void update(const std::string& label, double fraction);
    void done();

private:
    bool enabled_;
    bool drawn_ = false;
};

// True when stderr is a terminal (and NO_COLOR-style quiet is not requested).
bool stderr_is_terminal();

// Prints rows as an aligned table with a header.
void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

}  // namespace tileops::cli
