// Fuzzes the token file reader (worker/model/token_dataset.h): any bytes as an llm.c ".bin"
// token file and as a text file, then a few batches of it. Errors, never a crash, and every
// token handed out is below the vocabulary size.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "worker/model/token_dataset.h"

namespace {

// In memory where there is a tmpfs (the reader takes a path; ".bin" picks the format).
std::string TempPath(const char* suffix) {
  const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  return std::string(dir) + "/dtrain-token-fuzzer-" + std::to_string(getpid()) + suffix;
}

void ReadAsFile(const uint8_t* data, size_t size, const std::string& path, int vocab) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  absl::StatusOr<dtrain::model::TokenDataset> dataset =
      dtrain::model::TokenDataset::Open(path, vocab);
  if (!dataset.ok()) return;
  for (int B : {1, 2, 3}) {
    for (int T : {1, 4, 7}) {
      std::vector<int32_t> inputs(B * T), targets(B * T);
      for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{1} << 40}) {
        if (!dataset->GetBatch(k, B, T, absl::MakeSpan(inputs), absl::MakeSpan(targets)).ok()) {
          continue;
        }
        for (int i = 0; i < B * T; ++i) {
          if (inputs[i] < 0 || inputs[i] >= vocab || targets[i] < 0 || targets[i] >= vocab) {
            std::fprintf(stderr, "token %d/%d out of vocab %d\n", inputs[i], targets[i], vocab);
            std::abort();
          }
        }
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first byte picks the vocabulary: 0 (refused), 1..255, 50257 (GPT-2's) or 65536.
  int vocab = 50257;
  if (size > 0) {
    vocab = data[0] == 254 ? 65536 : data[0] == 255 ? 50257 : data[0];
    ++data;
    --size;
  }
  static const std::string bin = TempPath(".bin"), text = TempPath(".txt");
  static const int removed_at_exit = std::atexit([] {
    std::remove(bin.c_str());
    std::remove(text.c_str());
  });
  (void)removed_at_exit;
  ReadAsFile(data, size, bin, vocab);
  ReadAsFile(data, size, text, vocab);
  return 0;
}
