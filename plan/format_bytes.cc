#include "plan/format_bytes.h"

#include "absl/strings/str_format.h"

namespace dtrain::plan {

std::string FormatBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) bytes /= 1024, ++u;
  return u == 0 ? absl::StrFormat("%.0f B", bytes) : absl::StrFormat("%.1f %s", bytes, units[u]);
}

}  // namespace dtrain::plan
