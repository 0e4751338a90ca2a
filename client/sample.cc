#include "client/sample.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "plan/job_sample.h"

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

}  // namespace

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

absl::StatusOr<SampleParameters> SampleParametersOf(const Invocation& inv) {
  SampleParameters p;
  p.set_prompt(inv.prompt);
  p.set_tokens(inv.sample_tokens);
  double temperature = 0;
  if (!absl::SimpleAtod(inv.temperature, &temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--temperature=", inv.temperature, ": a number is wanted"));
  }
  p.set_temperature(temperature);
  p.set_top_k(inv.top_k);
  p.set_seed(static_cast<uint64_t>(inv.seed));
  RETURN_IF_ERROR(plan::CheckSampleParameters(p));
  return p;
}

}  // namespace client
}  // namespace dtrain
