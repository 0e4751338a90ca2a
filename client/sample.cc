#include "client/sample.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace dtrain {
namespace client {
namespace {

// $DTRAIN_SAMPLE, else dtrain-sample beside this binary, else "dtrain-sample" for PATH.
std::string SamplerPath() {
  const char* env = std::getenv(kSampleBinaryEnv);
  if (env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path beside = self.parent_path() / "dtrain-sample";
    if (access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  return "dtrain-sample";
}

// The argv of dtrain-sample at `path` for `checkpoint` (`args` keeps the strings).
std::vector<char*> SamplerArgv(const std::string& path, std::vector<std::string>& args) {
  args.insert(args.begin(), path);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return argv;
}

std::string CannotRun(const std::string& path, int error) {
  return absl::StrCat("cannot run ", path, ": ", std::strerror(error),
                      " (build //worker:dtrain-sample and put it beside dtrain, on PATH, or in $",
                      kSampleBinaryEnv, ")");
}

// Reads what `fd` has into `out`, up to `limit` bytes kept (the rest read and dropped); false at
// its end.
bool Drain(int fd, std::string& out, size_t limit) {
  char buffer[16384];
  const ssize_t n = read(fd, buffer, sizeof(buffer));
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  out.append(buffer, std::min(static_cast<size_t>(n), limit - std::min(limit, out.size())));
  return true;
}

// The last few lines of a sampler's stderr, for an error message.
std::string LastWords(const std::string& err) {
  absl::string_view text = absl::StripTrailingAsciiWhitespace(err);
  constexpr size_t kMax = 600;
  if (text.size() > kMax) text = text.substr(text.size() - kMax);
  return text.empty() ? "no message" : std::string(text);
}

}  // namespace

absl::StatusOr<SampleSource> SampleSourceOf(const Job& job) {
  if (job.checkpoint().last_sealed_step() > 0 && !job.checkpoint().dir().empty()) {
    return SampleSource{job.checkpoint().dir(), 0,
                        absl::StrCat("checkpoint ", job.checkpoint().dir(), " (step ",
                                     job.checkpoint().last_sealed_step(), ")")};
  }
  if (!job.output().empty()) {
    return SampleSource{job.output(), job.spec().model().n_head(),
                        absl::StrCat("final weights ", job.output())};
  }
  return absl::FailedPreconditionError(
      absl::StrCat(job.id(), " has no sealed checkpoint and no final weights yet to sample from"));
}

std::vector<std::string> SamplerArguments(const std::string& checkpoint, const Invocation& inv) {
  return {checkpoint,
          absl::StrCat("--prompt=", inv.prompt),
          absl::StrCat("--tokens=", inv.sample_tokens),
          absl::StrCat("--temperature=", inv.temperature),
          absl::StrCat("--top_k=", inv.top_k),
          absl::StrCat("--seed=", inv.seed),
          absl::StrCat("--device=", inv.device),
          absl::StrCat("--n_head=", inv.n_head),
          absl::StrCat("--tokenizer_dir=", inv.tokenizer_dir),
          inv.json ? "--json" : "--nojson"};
}

int RunSampler(const std::string& checkpoint, const Invocation& inv, std::ostream& err) {
  const std::string path = SamplerPath();
  std::vector<std::string> args = SamplerArguments(checkpoint, inv);
  std::vector<char*> argv = SamplerArgv(path, args);
  pid_t pid;
  const int rc = posix_spawnp(&pid, path.c_str(), nullptr, nullptr, argv.data(), environ);
  if (rc != 0) {
    err << "dtrain: " << CannotRun(path, rc) << "\n";
    return 2;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  err << "dtrain: " << path << " ended by signal " << WTERMSIG(status) << "\n";
  return 1;
}

absl::StatusOr<std::string> CaptureSample(const std::string& checkpoint, const Invocation& inv,
                                          absl::Duration timeout) {
  const std::string path = SamplerPath();
  Invocation json = inv;
  json.json = true;
  std::vector<std::string> args = SamplerArguments(checkpoint, json);
  std::vector<char*> argv = SamplerArgv(path, args);
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError(std::strerror(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    close(out[0]);
    close(out[1]);
    return absl::InternalError(std::strerror(e));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  pid_t pid;
  const int rc = posix_spawnp(&pid, path.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(out[0]);
    close(err[0]);
    return absl::FailedPreconditionError(CannotRun(path, rc));
  }
  // Both pipes read as they fill (a sampler blocked on a full stderr would never end).
  constexpr size_t kMaxOutput = 1 << 20;
  std::string stdout_text, stderr_text;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  const absl::Time deadline = absl::Now() + timeout;
  bool timed_out = false;
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    const int wait_ms =
        static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    const int ready = poll(fds, 2, wait_ms);
    if (ready == 0) {
      timed_out = true;
      break;
    }
    if (ready < 0 && errno != EINTR) break;
    for (int i = 0; i < 2 && ready > 0; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      if (!Drain(fds[i].fd, i == 0 ? stdout_text : stderr_text, kMaxOutput)) {
        close(fds[i].fd);
        fds[i].fd = -1;  // poll skips it
      }
    }
  }
  // Left early (the deadline, a poll error): the sampler is stopped, not waited for.
  const bool left_early = fds[0].fd >= 0 || fds[1].fd >= 0;
  for (const pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  if (left_early) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat(path, " did not finish in ", absl::FormatDuration(timeout), "; stopped"));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    return std::string(absl::StripAsciiWhitespace(stdout_text));
  }
  const std::string why = LastWords(stderr_text);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 2) return absl::InvalidArgumentError(why);
  return absl::InternalError(WIFEXITED(status)
                                 ? absl::StrCat(why, " (exit ", WEXITSTATUS(status), ")")
                                 : absl::StrCat(path, " ended by signal ", WTERMSIG(status)));
}

}  // namespace client
}  // namespace dtrain
