#include "worker/parallel/gradient_sync.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/comm/collectives/allreduce_ring.h"

namespace dtrain::parallel {

GradientSync::GradientSync(std::vector<SyncChunk> chunks, DeviceStaging* staging,
                           comm::HierarchicalAllReduce* dp, comm::SharedAllReduce* dp_shared,
                           comm::Group* tied, int64_t bucket_floats,
                           std::function<void(int64_t bytes, double seconds)> on_reduced)
    : chunks_(std::move(chunks)),
      staging_(staging),
      dp_(dp),
      dp_shared_(dp_shared),
      tied_(tied),
      bucket_floats_(std::max<int64_t>(1, bucket_floats)),
      on_reduced_(std::move(on_reduced)),
      state_(chunks_.size()) {
  thread_ = std::thread([this] { Loop(); });
}

GradientSync::~GradientSync() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void GradientSync::StartStep() {
  absl::MutexLock lock(&mu_);
  for (size_t c = 0; c < chunks_.size(); ++c) {
    state_[c] = ChunkState{chunks_[c].size, chunks_[c].size, false};
  }
  error_ = absl::OkStatus();
  finish_called_ = absl::InfiniteFuture();
  busy_ = overlapped_ = 0;
  queued_ = 0;
}

void GradientSync::MarkReady(int c, int64_t begin) {
  absl::MutexLock lock(&mu_);
  state_[c].frontier = std::min(state_[c].frontier, begin);
  QueueReady(c);
}

// Buckets are cut from the end of the buffer, [size - (k+1)*S, size - k*S), the one at offset 0
// shorter: a fixed cut, so every member reduces the same ranges whatever its ready ranges.
void GradientSync::QueueReady(int c) {
  ChunkState& s = state_[c];
  const SyncChunk& chunk = chunks_[c];
  const bool wte_final = !chunk.tied_range.has_value() || s.frontier <= chunk.tied_range->first;
  if (chunk.tied_range.has_value() && tied_ != nullptr && wte_final && !s.tied_queued) {
    queue_.push_back({c, chunk.tied_range->first, chunk.tied_range->second, true});
    ++queued_;
    s.tied_queued = true;
  }
  while (s.next_end > 0) {
    const int64_t begin = std::max<int64_t>(0, s.next_end - bucket_floats_);
    if (begin < s.frontier) break;  // backward has not finished it
    const bool overlaps_wte = chunk.tied_range.has_value() && begin < chunk.tied_range->second &&
                              s.next_end > chunk.tied_range->first;
    if (overlaps_wte && !wte_final) break;
    if (dp_ != nullptr) {
      queue_.push_back({c, begin, s.next_end, false});
      ++queued_;
    }
    s.next_end = begin;
  }
}

absl::Status GradientSync::Finish() {
  absl::MutexLock lock(&mu_);
  finish_called_ = absl::Now();
  queued_early_ = queued_;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    state_[c].frontier = 0;
    QueueReady(static_cast<int>(c));
  }
  mu_.Await(absl::Condition(
      +[](GradientSync* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
        return self->queue_.empty() && self->running_ == 0;
      },
      this));
  reduce_seconds_ = busy_;
  overlap_seconds_ = overlapped_;
  return error_;
}

void GradientSync::Loop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(
        +[](GradientSync* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
          return self->stop_ || !self->queue_.empty();
        },
        this));
    if (queue_.empty()) return;  // stop_
    Task task = queue_.front();
    queue_.pop_front();
    ++running_;
    const bool skip = !error_.ok();  // after a failure, drain without reducing
    mu_.Unlock();
    const absl::Time start = absl::Now();
    absl::Status s = skip ? absl::OkStatus() : RunTask(task);
    const absl::Time end = absl::Now();
    if (!skip && s.ok() && on_reduced_) {
      on_reduced_((task.end - task.begin) * int64_t{sizeof(float)},
                  absl::ToDoubleSeconds(end - start));
    }
    mu_.Lock();
    --running_;
    busy_ += absl::ToDoubleSeconds(end - start);
    overlapped_ += std::max(0.0, absl::ToDoubleSeconds(std::min(end, finish_called_) - start));
    if (!s.ok() && error_.ok()) error_ = s;
  }
}

absl::Status GradientSync::RunTask(const Task& task) {
  float* data = chunks_[task.chunk].grads + task.begin;
  const int64_t n = task.end - task.begin;
  if (task.tied) {
    absl::Status s = staging_->OnHost(data, n, /*chunked=*/true, [&](absl::Span<float> host) {
      return comm::AllReduce(*tied_, host, comm::ReduceOp::kSum);
    });
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("summing the tied embedding's gradient: ", s.message()));
    }
    return s;
  }
  const auto reduce = [&](absl::Span<float> host) {
    return dp_shared_ != nullptr ? dp_shared_->Run(host, comm::ReduceOp::kSum)
                                 : dp_->Run(host, comm::ReduceOp::kSum);
  };
  float* mirror = chunks_[task.chunk].host_mirror;
  absl::Status s = dp_shared_ != nullptr && mirror != nullptr
                       ? staging_->OnHostIn(data, n, mirror + task.begin, /*chunked=*/true, reduce)
                       : staging_->OnHost(data, n, /*chunked=*/true, reduce);
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("data-parallel gradient bucket [", task.begin, ", ", task.end,
                                     ") of chunk ", task.chunk, ": ", s.message()));
  }
  return s;
}

}  // namespace dtrain::parallel
