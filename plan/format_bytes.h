// Byte counts as people read them, for messages of the plan, the coordinator and the workers.
#ifndef DTRAIN_PLAN_FORMAT_BYTES_H_
#define DTRAIN_PLAN_FORMAT_BYTES_H_

#include <string>

namespace dtrain::plan {

// "31.2 GiB", "353.0 KiB", "12 B".
std::string FormatBytes(double bytes);

}  // namespace dtrain::plan

#endif  // DTRAIN_PLAN_FORMAT_BYTES_H_
