#include "common/version.h"

#include "absl/strings/str_cat.h"
#include "common/build_commit.h"  // generated: DTRAIN_BUILD_COMMIT (common/BUILD)

namespace dtrain {

std::string BuildCommit() { return DTRAIN_BUILD_COMMIT; }

std::string VersionText(absl::string_view program) {
  return absl::StrCat(program, " ", kVersion, " (commit ", BuildCommit(), ")");
}

}  // namespace dtrain
