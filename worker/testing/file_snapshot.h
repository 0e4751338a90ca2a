// Every file under a directory with its bytes, for tests that prove a run changed nothing on
// disk ("a refused resume leaves the checkpoint byte-identical").
#ifndef DTRAIN_WORKER_TESTING_FILE_SNAPSHOT_H_
#define DTRAIN_WORKER_TESTING_FILE_SNAPSHOT_H_

#include <map>
#include <string>

namespace dtrain::testing {

// Path (under `dir`, recursively) -> contents, for every regular file; empty if `dir` is absent.
std::map<std::string, std::string> SnapshotFiles(const std::string& dir);

}  // namespace dtrain::testing

#endif  // DTRAIN_WORKER_TESTING_FILE_SNAPSHOT_H_
