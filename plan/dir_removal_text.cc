#include "plan/dir_removal_text.h"

#include "absl/strings/str_cat.h"
#include "plan/format_bytes.h"

namespace dtrain::plan {
std::string DescribeDirRemoval(const JobDirRemoved& r) {
  // " on host-a"; nothing when the host is not known (a directory the job never reported).
  const std::string on = r.host().empty() ? "" : absl::StrCat(" on ", r.host());
  switch (r.state()) {
    case DIR_REMOVED:
      return absl::StrCat("removed ", r.dir(), on, " (",
                          FormatBytes(static_cast<double>(r.bytes())), ", worker ", r.worker_id(),
                          ")");
    case DIR_ABSENT:
      return absl::StrCat(r.dir(), " was already gone", on, " (worker ", r.worker_id(),
                          " found nothing there)");
    case DIR_REMOVAL_FAILED:
      return absl::StrCat("worker ", r.worker_id(), " did not remove ", r.dir(), on, ": ",
                          r.error());
    case DIR_REMOVAL_ABANDONED:
      return absl::StrCat(r.dir(), on, " is left in place: ", r.error(),
                          "; remove it there by hand");
    default:
      return absl::StrCat(
          r.dir(), on, " is to be removed by ",
          r.worker_id().empty() ? "a worker there" : absl::StrCat("worker ", r.worker_id()),
          " at its next heartbeat; the coordinator keeps asking (also after "
          "a restart) and logs the outcome");
  }
}

}  // namespace dtrain::plan
