#include "worker/testing/file_snapshot.h"

#include <filesystem>
#include <fstream>
#include <iterator>

namespace dtrain::testing {

std::map<std::string, std::string> SnapshotFiles(const std::string& dir) {
  std::map<std::string, std::string> files;
  std::error_code error;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, error)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    files[e.path().string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return files;
}

}  // namespace dtrain::testing
