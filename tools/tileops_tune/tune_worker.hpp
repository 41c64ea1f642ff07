// tileops-tune tune runs the candidates of its problems in a worker process per GPU, so that one
// that traps, hangs or corrupts its CUDA context fails alone and the tune goes on.
//
// The worker is this executable run as `tileops-tune tune-worker --device N` (a command the usage
// does not list). It speaks JSON lines: requests on its stdin, one answer line each on its stdout
// (its logs go to stderr). Its first line says it is ready ({"ready": true}); then:
//   {"problem": {"op", "shape", "dtype", "flags"}, "seed": S}  -> {"vector_width": V, "bytes_moved": B}
//   {"measure": CONFIG, "index": I, "warmup": W, "repeats": R} -> {"ok": true, "median_us", "spread_us"}
//                                                                  or {"ok": false, "failure": "..."}
//   {"retime": [CONFIG...], "rounds": N}                        -> {"samples": [[us...]...]}
// Any request can instead be answered {"error": "..."}. After a candidate leaves the context
// unusable the worker answers {"ok": false, "failure": ..., "context_lost": true} and exits.
//
// Test hook: TILEOPS_TUNE_TEST_FAULTS="2:oob,4:trap,6:hang" makes the worker run a deliberately
// faulty kernel in place of candidate 2, 4, 6 of every problem (a write far out of bounds, a trap,
// a loop that never ends), for the tests of the watchdog.
#pragma once

namespace tileops::cli {

int cmd_tune_worker(int argc, char** argv);

}  // namespace tileops::cli
