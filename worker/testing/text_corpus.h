// A deterministic byte-level text corpus for tests and benchmarks: the same bytes on every run,
// varied enough that a small model's loss falls on it (read as bytes, vocab 256).
#ifndef DTRAIN_WORKER_TESTING_TEXT_CORPUS_H_
#define DTRAIN_WORKER_TESTING_TEXT_CORPUS_H_

#include <cstdint>
#include <string>

namespace dtrain::testing {

// Writes `bytes` bytes of the corpus to `path` (replacing it) and returns `path`.
std::string WriteTextCorpus(const std::string& path, int64_t bytes);

}  // namespace dtrain::testing

#endif  // DTRAIN_WORKER_TESTING_TEXT_CORPUS_H_
