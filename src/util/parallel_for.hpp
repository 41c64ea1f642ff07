// Host loops over large arrays spread over the CPU's threads (the autotuner checks every candidate's
// outputs, up to 10^8 elements, against the heuristic's).
#pragma once

#include <cstddef>
#include <functional>

namespace tileops::util {

// Runs body(i) for every i in [0, n) on `threads` threads (0: hardware_concurrency), the caller's
// among them, each taking the next index as it finishes one (uneven items balance themselves);
// returns when all are done. One thread runs them in order on the caller. `body` must not throw.
void parallel_for_each(size_t n, size_t threads, const std::function<void(size_t i)>& body);

// The number of chunks parallel_for_chunks cuts [0, n) into: pieces of at least `grain` elements.
size_t chunk_count(size_t n, size_t grain);

// Runs body(chunk, begin, end) for each of chunk_count(n, grain) consecutive pieces of [0, n), on
// up to hardware_concurrency threads, and returns when all are done. Chunk k always covers the
// same range, so per-chunk partial results combined in chunk order are deterministic. `body`
// must not throw.
void parallel_for_chunks(size_t n, size_t grain, const std::function<void(size_t chunk, size_t begin, size_t end)>& body);

}  // namespace tileops::util
