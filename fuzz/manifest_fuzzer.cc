// Fuzzes the checkpoint manifest's reader, ParseManifest (worker/parallel/manifest.h), on any
// bytes: errors, never a crash. A manifest that parses is written back (ManifestToJson) and
// must parse again, and every one of its files' stored arrays must have a readable geometry or
// a clear error (ShardRuns).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "worker/parallel/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace parallel = dtrain::parallel;
  const absl::string_view json(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<parallel::Manifest> manifest = parallel::ParseManifest(json, "fuzz/manifest.json");
  if (!manifest.ok()) return 0;
  absl::StatusOr<std::string> again = parallel::ManifestToJson(*manifest);
  if (again.ok() && !parallel::ParseManifest(*again, "fuzz/again.json").ok()) {
    std::fprintf(stderr, "a parsed manifest written back does not parse:\n%s\n", again->c_str());
    std::abort();
  }
  return 0;
}
