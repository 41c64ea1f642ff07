// The tileops-tune subcommands. Each parses its own arguments and returns the exit code:
// 0 success, 1 the work failed (some problem could not be tuned, drift above the limit, ...),
// 2 bad usage. Errors are printed on stderr.
#pragma once

#include <string>

namespace tileops::cli {

int cmd_tune(int argc, char** argv);
int cmd_warm(int argc, char** argv);
int cmd_list(int argc, char** argv);
int cmd_show(int argc, char** argv);
int cmd_merge(int argc, char** argv);
int cmd_verify(int argc, char** argv);
int cmd_explain(int argc, char** argv);
int cmd_rekey(int argc, char** argv);
int cmd_cache(int argc, char** argv);
int cmd_pack(int argc, char** argv);
int cmd_unpack(int argc, char** argv);

}  // namespace tileops::cli
