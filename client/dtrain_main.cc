// dtrain: the command line of the dtrain training service. See `dtrain help` and
// client/README.md.
//
//   dtrain submit deploy/examples/tiny.json --watch
//   dtrain --coordinator=10.0.0.5:7070 workers
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "client/commands.h"
#include "client/coordinator_stub.h"

int main(int argc, char** argv) {
  using namespace dtrain::client;
  const std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<Invocation> inv = ParseArguments(args, std::getenv(kCoordinatorEnv));
  if (!inv.ok()) {
    std::cerr << "dtrain: " << inv.status().message() << "\n"
              << "Run 'dtrain help' for usage.\n";
    return kExitUsage;
  }
  StubOptions options;
  options.timeout = inv->timeout;
  options.reconnect_for = inv->reconnect_for;
  std::unique_ptr<CoordinatorStub> stub = CoordinatorStub::Connect(inv->coordinator, options);
  Output output{std::cout, std::cerr, isatty(STDOUT_FILENO) == 1};
  return RunInvocation(*inv, *stub, output);
}
