// The cost of recording: Begin + End of one record (a schedule action or a receive) and Instant
// (a send), on one thread and with `threads` threads recording into one recorder at once (the
// trainer thread, the gradient-sync thread, gRPC delivery). Numbers in docs/PERFORMANCE.md.
//
//   bazel run -c opt //worker/comm:flight_recorder_benchmark -- 4
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "worker/comm/flight_recorder.h"

namespace {

using dtrain::comm::FlightOp;
using dtrain::comm::FlightRecord;
using dtrain::comm::FlightRecorder;
using dtrain::comm::MessageKey;

// Nanoseconds per Begin + End pair on each of `threads` threads.
double BeginEndNs(FlightRecorder& recorder, int threads, int per_thread) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&recorder, per_thread, t] {
      const FlightRecord r =
          FlightRecord::Message(FlightOp::kRecv, t, MessageKey::Activation(1, 2), 4096);
      for (int i = 0; i < per_thread; ++i) recorder.End(recorder.Begin(r), true);
    });
  }
  for (std::thread& w : workers) w.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s * 1e9 / per_thread;
}

double InstantNs(FlightRecorder& recorder, int n) {
  const FlightRecord r =
      FlightRecord::Message(FlightOp::kSend, 1, MessageKey::Gradient(1, 2), 4096);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) recorder.Instant(r);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s * 1e9 / n;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 4;
  const int n = 2000000;
  FlightRecorder recorder;
  BeginEndNs(recorder, 1, n / 10);  // warm up
  std::printf("RESULT begin_end_ns=%.1f threads=1\n", BeginEndNs(recorder, 1, n));
  std::printf("RESULT instant_ns=%.1f threads=1\n", InstantNs(recorder, n));
  std::printf("RESULT begin_end_ns=%.1f threads=%d (per pair, each thread)\n",
              BeginEndNs(recorder, threads, n / threads), threads);
  return 0;
}
