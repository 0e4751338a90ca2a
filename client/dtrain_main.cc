// dtrain: the command line of the dtrain training service. See `dtrain help` and
// client/README.md.
//
//   dtrain submit deploy/examples/tiny.json --watch
//   dtrain --coordinator=10.0.0.5:7070 workers
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/arguments.h"
#include "client/commands.h"
#include "client/console.h"
#include "client/coordinator_stub.h"
#include "client/format.h"
#include "common/tls.h"
#include "grpc/support/log.h"

namespace {

// What Ctrl-C prints while a watch runs; written by the handler, so prepared beforehand.
char interrupt_note[1024];
size_t interrupt_note_size = 0;

void OnInterrupt(int) {
  // Only async-signal-safe calls here: write(2) and _exit(2).
  if (interrupt_note_size > 0) {
    ssize_t ignored = write(STDERR_FILENO, interrupt_note, interrupt_note_size);
    (void)ignored;
  }
  _exit(dtrain::client::kExitInterrupted);
}

// Ctrl-C while watching `job_id` stops the watch, not the job, and says how to stop the job.
void ArmInterruptNote(const std::string& job_id, const std::string& coordinator, bool tty) {
  using namespace dtrain::client;
  const std::string note = absl::StrCat(
      tty ? "\n" : "",
      "dtrain: ", KeepsRunningNote(job_id, coordinator == kDefaultCoordinator ? "" : coordinator),
      "\n");
  interrupt_note_size = std::min(note.size(), sizeof(interrupt_note));
  std::memcpy(interrupt_note, note.data(), interrupt_note_size);
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtrain::client;
  const std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<Invocation> inv = ParseArguments(args, std::getenv(kCoordinatorEnv));
  if (!inv.ok()) {
    std::cerr << "dtrain: " << inv.status().message() << "\n"
              << "Run 'dtrain help' for usage.\n";
    return kExitUsage;
  }
  const bool tty = isatty(STDOUT_FILENO) == 1;
  Output output{std::cout, std::cerr, tty, &std::cin};
  // help, version, plan and export build no channel (so no resolver complains about an address
  // they never use).
  if (!NeedsCoordinator(*inv)) return RunWithoutCoordinator(*inv, output);
  // gRPC's own log lines (a failed handshake) would be a second, rawer report of what the
  // command says in one line.
  gpr_set_log_function([](gpr_log_func_args*) {});
  const dtrain::TlsFiles tls = TlsFilesOf(*inv, std::getenv);
  absl::Status valid = dtrain::ValidateTlsFiles(tls, "the CLI");
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      valid.ok() ? dtrain::ChannelCredentials(tls) : valid;
  if (!credentials.ok()) {
    // ValidateTlsFiles' words are the daemons'; the CLI also reads its environment.
    std::cerr
        << "dtrain: " << credentials.status().message()
        << (tls.ca.empty() && tls.cert.empty() && !tls.insecure
                ? " (or $DTRAIN_TLS_CA, $DTRAIN_TLS_CERT, $DTRAIN_TLS_KEY; $DTRAIN_INSECURE=1)"
                : "")
        << "\n";
    return kExitUsage;
  }
  StubOptions options;
  options.credentials = *credentials;
  options.timeout = inv->timeout;
  options.reconnect_for = inv->reconnect_for;
  std::unique_ptr<CoordinatorStub> stub = CoordinatorStub::Connect(inv->coordinator, options);
  output.on_watch = [&](const std::string& job_id) {
    ArmInterruptNote(job_id, inv->coordinator, tty);
  };
  // The console links a web server (and its pages), which no other command needs.
  if (inv->command == "console") return RunConsole(*inv, *stub, output);
  return RunInvocation(*inv, *stub, output);
}
