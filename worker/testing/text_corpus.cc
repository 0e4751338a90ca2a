#include "worker/testing/text_corpus.h"

#include <fstream>

namespace dtrain::testing {

std::string WriteTextCorpus(const std::string& path, int64_t bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const std::string words = "the quick brown fox jumps over the lazy dog; ";
  for (int64_t i = 0; i < bytes; ++i) out << words[(i * 7 + i / 13) % words.size()];
  return path;
}

}  // namespace dtrain::testing
