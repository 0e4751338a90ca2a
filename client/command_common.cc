// What the CLI's commands share: failures printed with their exit code, job ids resolved from
// names and numbers, spec files read within bounds.
#include "client/command_set.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/format.h"
#include "common/status_macros.h"
#include "common/tls_probe.h"

namespace dtrain::client::command {

// Prints a failed call and returns its exit code.
int Fail(const absl::Status& status, const Invocation& inv, Output& output) {
  const int code = ExitCodeFor(status);
  if (status.code() == absl::StatusCode::kDeadlineExceeded &&
      AcceptsConnections(inv.coordinator, std::min(inv.timeout, absl::Milliseconds(500)))) {
    // Its kernel accepts connections, its process answered nothing within --timeout (hung,
    // paused, overloaded): no TLS probe, which would wait as long again for a handshake.
    output.err << "dtrain: " << NoAnswerWithin(inv.coordinator, inv.timeout) << "\n";
    return code;
  }
  if (code == kExitUnreachable) {
    // A handshake the coordinator refused reads "Socket closed"; say which side refused whom.
    const std::string why =
        DiagnoseTlsFailure(inv.coordinator, TlsFilesOf(inv, std::getenv), inv.timeout);
    if (!why.empty()) {
      output.err << "dtrain: cannot reach the coordinator at " << inv.coordinator << ": " << why
                 << "\n";
      return code;
    }
    output.err << "dtrain: cannot reach the coordinator at " << inv.coordinator << ": "
               << status.message() << "\n"
               << "dtrain: is it running? Point --coordinator=HOST:PORT or $" << kCoordinatorEnv
               << " at it.\n";
  } else {
    output.err << "dtrain: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
               << "\n";
  }
  return code;
}

// A NOT_FOUND about a job, with where to look: "...; the newest is job-000012 (dtrain list)".
absl::Status WithNewestJobHint(CoordinatorStub& stub, const absl::Status& status) {
  if (status.code() != absl::StatusCode::kNotFound) return status;
  absl::StatusOr<ListJobsResponse> newest = stub.ListJobs(1);
  if (!newest.ok()) return status;
  const std::string hint =
      newest->jobs_size() == 0
          ? "there are no jobs yet"
          : absl::StrCat("the newest is ", newest->jobs(0).id(), " (dtrain list)");
  return absl::NotFoundError(absl::StrCat(status.message(), "; ", hint));
}

// The job id `arg` names: an id or a number (JobIdFromArgument), else the one job of that name
// (the coordinator's name index: found whatever its age). NOT_FOUND (with the newest id) for no
// such job; INVALID_ARGUMENT listing (the newest 10 of) them when several jobs have the name.
absl::StatusOr<std::string> ResolveJobId(CoordinatorStub& stub, const std::string& arg) {
  if (std::optional<std::string> id = JobIdFromArgument(arg)) return *id;
  ListJobsRequest request;
  request.set_name(arg);
  request.set_limit(10);
  ASSIGN_OR_RETURN(ListJobsResponse jobs, stub.ListJobs(request));
  std::vector<std::string> matches;
  for (const Job& job : jobs.jobs()) {
    matches.push_back(absl::StrCat(job.id(), " (", JobStateName(job.state()), ")"));
  }
  if (!jobs.next_page_token().empty()) matches.push_back("and more");
  if (matches.size() == 1) return matches[0].substr(0, matches[0].find(' '));
  if (matches.empty()) {
    return WithNewestJobHint(
        stub, absl::NotFoundError(absl::StrCat("no job with the id or name '", arg, "'")));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", arg, "' names ",
                   jobs.next_page_token().empty() ? absl::StrCat(matches.size()) : "more than 10",
                   " jobs: ", absl::StrJoin(matches, ", "), "; give one of their ids"));
}

namespace {

// Reads were unbounded: `dtrain submit /dev/zero` held 1.7 GB after 4 s. A spec is JSON of
// at most the coordinator's --max_spec_bytes (1 MiB by default); this leaves room for a raised
// limit and stops reading a stream that never ends.
constexpr int64_t kMaxSpecFileBytes = int64_t{16} << 20;

// Appends up to `limit` + 1 bytes of `in` to `text` (one more than allowed says "too large").
void ReadAtMost(std::istream& in, int64_t limit, std::string* text) {
  char buffer[64 << 10];
  while (in && static_cast<int64_t>(text->size()) <= limit) {
    const int64_t want =
        std::min<int64_t>(sizeof(buffer), limit + 1 - static_cast<int64_t>(text->size()));
    in.read(buffer, want);
    text->append(buffer, static_cast<size_t>(in.gcount()));
  }
}

}  // namespace

// The text of a spec file (`-`: standard input); nullopt after printing why it cannot be used:
// missing or unreadable, a directory, larger than kMaxSpecFileBytes, or empty.
std::optional<std::string> ReadSpecFile(const std::string& path, Output& output) {
  std::string text;
  const std::string name = path == "-" ? "standard input" : path;
  if (path == "-") {
    if (output.in != nullptr) ReadAtMost(*output.in, kMaxSpecFileBytes, &text);
  } else {
    struct stat info;
    if (stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
      output.err << "dtrain: " << path << " is a directory, not a job spec file\n";
      return std::nullopt;
    }
    std::ifstream file(path, std::ios::binary);
    if (file) ReadAtMost(file, kMaxSpecFileBytes, &text);
    if (!file.is_open() || file.bad()) {
      output.err << "dtrain: cannot read " << path << ": " << std::strerror(errno) << "\n";
      return std::nullopt;
    }
  }
  if (static_cast<int64_t>(text.size()) > kMaxSpecFileBytes) {
    output.err << "dtrain: " << name << " is larger than " << (kMaxSpecFileBytes >> 20)
               << " MiB: not a job spec (a JSON object; the coordinator accepts at most its "
                  "--max_spec_bytes, 1 MiB by default)\n";
    return std::nullopt;
  }
  if (absl::StripAsciiWhitespace(text).empty()) {
    output.err << "dtrain: " << name
               << ": file is empty (a job spec is a JSON object; see deploy/examples/)\n";
    return std::nullopt;
  }
  return text;
}

// Runs `each` for every job id argument, resolved; returns the first failure's exit code (every
// argument is still tried).
int ForEachJob(const Invocation& inv, CoordinatorStub& stub, Output& output,
               const std::function<int(const std::string& job_id)>& each) {
  int exit_code = kExitOk;
  for (const std::string& arg : inv.args) {
    absl::StatusOr<std::string> id = ResolveJobId(stub, arg);
    const int code = id.ok() ? each(*id) : Fail(id.status(), inv, output);
    if (exit_code == kExitOk) exit_code = code;
  }
  return exit_code;
}

}  // namespace dtrain::client::command
