#include "worker/comm/collectives/group.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace dtrain::comm {

absl::StatusOr<Group> Group::Create(Transport* transport, std::vector<int> ranks, int32_t id,
                                    CollectiveOptions options) {
  const std::string what = absl::StrCat("group ", id, " (ranks ", absl::StrJoin(ranks, ","), ")");
  if (ranks.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no ranks"));
  Group g;
  g.index_ = -1;
  for (int i = 0; i < static_cast<int>(ranks.size()); ++i) {
    if (ranks[i] < 0 || ranks[i] >= transport->size()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", ranks[i], " outside the ",
                                                     transport->size(), " ranks of the job"));
    }
    if (std::count(ranks.begin(), ranks.end(), ranks[i]) > 1) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", ranks[i], " twice"));
    }
    if (ranks[i] == transport->rank()) g.index_ = i;
  }
  if (g.index_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": does not include this rank, ", transport->rank()));
  }
  if (options.chunk_bytes < 4) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": chunk_bytes ", options.chunk_bytes));
  }
  g.transport_ = transport;
  g.ranks_ = std::move(ranks);
  g.id_ = id;
  g.options_ = options;
  return g;
}

std::string Group::Describe() const {
  return absl::StrCat("group ", id_, " (ranks ", absl::StrJoin(ranks_, ","), ")");
}

CollectiveOp::CollectiveOp(Group& group, std::string description)
    : group_(group),
      sent_to_(group.size(), false),
      seq_(group.NextSeq()),
      deadline_(absl::Now() + group.options().timeout),
      description_(std::move(description)),
      recorded_(group.transport().recorder(),
                FlightRecord::Collective(group.id(), seq_, description_)) {}

absl::StatusOr<SendHandle> CollectiveOp::Send(int index, int32_t part,
                                              absl::Span<const float> data) {
  sent_to_[index] = true;
  absl::StatusOr<SendHandle> send = group_.transport().StartSend(
      group_.rank_at(index), MessageKey::Collective(group_.id(), seq_, part),
      TensorMeta::F32(static_cast<int64_t>(data.size())), AsBytes(data), deadline_);
  if (!send.ok()) return Fail(send.status());
  return send;
}

absl::Status CollectiveOp::Recv(int index, int32_t part, int64_t count, PieceSink sink) {
  RecvOptions options;
  options.order = RecvOrder::kInOrder;
  options.watch = group_.ranks();
  return Fail(group_.transport().Recv(group_.rank_at(index),
                                      MessageKey::Collective(group_.id(), seq_, part),
                                      TensorMeta::F32(count), sink, deadline_, options));
}

absl::Status CollectiveOp::Wait(SendHandle& send) {
  if (send == nullptr) return absl::OkStatus();
  absl::Status s = send->Wait(deadline_);
  send.reset();
  return Fail(s);
}

absl::Status CollectiveOp::Fail(const absl::Status& status) const {
  return Annotate(status, absl::StrCat(description_, " in ", group_.Describe(), ", op ", seq_));
}

absl::Status CollectiveOp::Finish(absl::Status status) {
  recorded_.Finish(status);
  if (status.ok() || aborted_) return status;
  aborted_ = true;
  for (int i = 0; i < group_.size(); ++i) {
    if (!sent_to_[i]) continue;
    // Best effort: a member that is gone or unreachable cannot be waiting for us anyway.
    group_.transport()
        .Post(group_.rank_at(i), MessageKey::Collective(group_.id(), seq_, MessageKey::kAbortPart),
              absl::StrCat("rank ", group_.transport().rank(), ": ", status.message()))
        .IgnoreError();
  }
  return status;
}

Segment RingSegment(int64_t count, int n, int i) {
  const int64_t base = count / n;
  const int64_t extra = count % n;
  return Segment{base * i + std::min<int64_t>(i, extra), base + (i < extra ? 1 : 0)};
}

}  // namespace dtrain::comm
