// What happened to a deleted job's directory, in one line: the coordinator's log and `dtrain
// delete` say it the same way.
#ifndef DTRAIN_PLAN_DIR_REMOVAL_TEXT_H_
#define DTRAIN_PLAN_DIR_REMOVAL_TEXT_H_

#include <string>

#include "proto/coordinator.pb.h"

namespace dtrain::plan {

// A worker's answer, or a removal still pending (DIR_REMOVAL_PENDING, naming the worker asked):
// "removed /ckpt/job-000003 on host-a (412.3 MiB, worker w1)".
std::string DescribeDirRemoval(const JobDirRemoved& removed);

}  // namespace dtrain::plan

#endif  // DTRAIN_PLAN_DIR_REMOVAL_TEXT_H_
