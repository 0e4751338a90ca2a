// The process_* series every Prometheus client library exports and prometheus-cpp 1.0.1 does not
// (it has no process collector), read from /proc/self on every scrape, and dtrain_build_info:
//
//   process_cpu_seconds_total        counter  user + system CPU time (/proc/self/stat)
//   process_resident_memory_bytes    gauge    resident set size (/proc/self/statm)
//   process_virtual_memory_bytes     gauge    virtual memory size
//   process_open_fds                 gauge    entries of /proc/self/fd
//   process_max_fds                  gauge    the soft RLIMIT_NOFILE
//   process_threads                  gauge    threads of the process (/proc/self/stat)
//   process_start_time_seconds       gauge    start time, seconds since the Unix epoch
//   dtrain_build_info{version,commit} gauge   1: the version and commit of the binary
//
//   RETURN_IF_ERROR(ExportProcessMetrics(&registry));
#ifndef DTRAIN_COMMON_METRICS_PROCESS_METRICS_H_
#define DTRAIN_COMMON_METRICS_PROCESS_METRICS_H_

#include "absl/status/status.h"
#include "common/metrics/registry.h"

namespace dtrain::metrics {

// Registers the families above on `registry` with a collect hook that reads /proc/self; the
// registry must outlive nothing else (the hook lives as long as it). AlreadyExists when called
// twice on one registry.
absl::Status ExportProcessMetrics(Registry* registry);

}  // namespace dtrain::metrics

#endif  // DTRAIN_COMMON_METRICS_PROCESS_METRICS_H_
