#include "worker/parallel/stage_executor.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/comm/flight_recorder.h"

namespace dtrain::parallel {
namespace {

using pipeline::Action;
using pipeline::ActionType;

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Prefixes an error with the action it happened in: "F3.1 of step 7: ...".
absl::Status InAction(const absl::Status& s, const Action& a, int64_t step) {
  if (s.ok()) return s;
  return absl::Status(
      s.code(), absl::StrCat(pipeline::ActionToString(a), " of step ", step, ": ", s.message()));
}

}  // namespace

StageExecutor::StageExecutor(std::vector<model::GptStage*> chunks, int pp, int pp_rank,
                             comm::StageLinks* links, DeviceStaging* staging, int micro_batch_rows,
                             int seq, float loss_scale)
    : chunks_(std::move(chunks)),
      pp_(pp),
      pp_rank_(pp_rank),
      num_model_chunks_(pp * static_cast<int>(chunks_.size())),
      links_(links),
      b_(micro_batch_rows),
      T_(seq),
      loss_scale_(loss_scale),
      staging_(staging),
      free_(chunks_.size()),
      draining_(chunks_.size()) {}

absl::Status StageExecutor::Receive(bool activation, const comm::StageKey& key,
                                    const std::vector<int64_t>& shape, StepTimes* times) {
  const int64_t n = int64_t{b_} * T_ * chunks_.front()->config().n_embd;
  if (recv_device_.size() == 0) {
    ASSIGN_OR_RETURN(recv_device_,
                     kernels::DeviceBuffer<float>::Create(chunks_.front()->backend(), n));
  }
  ASSIGN_OR_RETURN(StagedTensor host, staging_->ReceiveBuffer(recv_device_.data(), n));
  const auto wait = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(activation ? links_->RecvActivation(key, shape, host.host())
                             : links_->RecvGradient(key, shape, host.host()));
  times->wait += Since(wait);
  return staging_->ToDevice(recv_device_.data(), host);
}

absl::Status StageExecutor::RunStep(
    int64_t step, absl::Span<const Action> actions, const std::function<MicroBatch(int)>& data,
    const std::function<model::GptStage::GradReadyFn(int)>& weights_final, StepTimes* times) {
  trace_.clear();
  losses_.clear();
  // W (or fused backward) count per chunk, to know which one is the chunk's last of the step.
  std::vector<int> weights_left(chunks_.size(), 0);
  for (const Action& a : actions) {
    if (a.type == ActionType::kBackward || a.type == ActionType::kBackwardWeight) {
      ++weights_left[a.chunk];
    }
  }
  pipeline::ReadyWork work(actions, execution_);
  while (!work.finished()) {
    const Action a = Next(step, work, times);
    absl::Status s;
    // A fused backward is recorded as B: the record says what the rank waits in, not its parts.
    comm::FlightScope recorded(
        links_->recorder(),
        comm::FlightRecord::Action(a.type == ActionType::kForward ? comm::FlightOp::kForward
                                   : a.type == ActionType::kBackwardWeight
                                       ? comm::FlightOp::kBackwardWeight
                                       : comm::FlightOp::kBackwardInput,
                                   step, a.micro_batch, a.chunk));
    switch (a.type) {
      case ActionType::kForward:
        s = Forward(step, a, data(a.micro_batch), times);
        break;
      case ActionType::kBackwardInput:
        s = BackwardInput(step, a, times);
        break;
      case ActionType::kBackwardWeight:
      case ActionType::kBackward: {
        const bool fused = a.type == ActionType::kBackward;
        const bool send_after_weights =
            fused && gradient_release_ == pipeline::GradientRelease::kAfterWeights;
        if (fused) s = BackwardInput(step, a, times, /*send=*/!send_after_weights);
        if (!s.ok()) break;
        const bool last = --weights_left[a.chunk] == 0;
        s = BackwardWeight(a, last ? weights_final(a.chunk) : model::GptStage::GradReadyFn(),
                           times);
        if (s.ok() && send_after_weights) s = SendInputGradient(step, a);
        if (s.ok()) Retire(a.chunk, a.micro_batch);
        break;
      }
    }
    recorded.Finish(s);
    RETURN_IF_ERROR(InAction(s, a, step));
    RETURN_IF_ERROR(InAction(work.Ran(a), a, step));
    trace_.push_back(a);
  }
  RETURN_IF_ERROR(DrainAll(times));
  if (!in_flight_.empty()) {
    const auto& [key, unused] = *in_flight_.begin();
    return absl::InternalError(absl::StrCat("step ", step, ": the schedule left micro-batch ",
                                            key.second, " of chunk ", key.first,
                                            " without its weight backward"));
  }
  return absl::OkStatus();
}

bool StageExecutor::InputArrived(int64_t step, const Action& a) {
  const int k = ModelChunk(a.chunk);
  switch (a.type) {
    case ActionType::kForward:
      return k == 0 || links_->ActivationArrived({step, a.micro_batch, k});
    case ActionType::kBackward:
    case ActionType::kBackwardInput:
      return k == num_model_chunks_ - 1 || links_->GradientArrived({step, a.micro_batch, k});
    case ActionType::kBackwardWeight:
      return true;
  }
  return true;
}

Action StageExecutor::Next(int64_t step, const pipeline::ReadyWork& work, StepTimes* times) {
  const std::vector<Action> allowed = work.Allowed();
  // One choice (always under the fixed order): its receive waits, with its deadline.
  if (allowed.size() == 1) return allowed.front();
  const auto start = std::chrono::steady_clock::now();
  const absl::Time block_at = absl::Now() + kPollBeforeBlocking;
  // The poll backs off from 20 us to 320 us: a short wait is seen at once, a long one does not
  // take the CPU a stage sharing the core needs (at most 3% of a 10 ms F or B late).
  absl::Duration pause = absl::Microseconds(20);
  while (true) {
    for (const Action& a : allowed) {
      if (InputArrived(step, a)) {
        times->wait += Since(start);
        return a;
      }
    }
    if (absl::Now() >= block_at) break;
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Microseconds(320));
  }
  times->wait += Since(start);
  return allowed.front();  // the list's next action: wait in its receive as the fixed order does
}

absl::Status StageExecutor::RunForward(int64_t step, absl::Span<const Action> forwards,
                                       const std::function<MicroBatch(int)>& data,
                                       StepTimes* times) {
  losses_.clear();
  for (const Action& a : forwards) {
    if (a.type != ActionType::kForward) {
      return absl::InternalError(
          absl::StrCat("forward-only pass of step ", step, " given ", pipeline::ActionToString(a)));
    }
    comm::FlightScope recorded(
        links_->recorder(),
        comm::FlightRecord::Action(comm::FlightOp::kForward, step, a.micro_batch, a.chunk));
    absl::Status s = Forward(step, a, data(a.micro_batch), times);
    if (s.ok()) Retire(a.chunk, a.micro_batch);  // its sends are waited for before reuse
    recorded.Finish(s);
    RETURN_IF_ERROR(InAction(s, a, step));
  }
  return DrainAll(times);
}

absl::Status StageExecutor::Forward(int64_t step, const Action& a, const MicroBatch& mb,
                                    StepTimes* times) {
  model::GptStage& stage = *chunks_[a.chunk];
  const int k = ModelChunk(a.chunk);
  const int64_t C = stage.config().n_embd;
  const std::vector<int64_t> shape = {b_, T_, C};
  auto [it, inserted] = in_flight_.try_emplace({a.chunk, a.micro_batch});
  if (!inserted) return absl::InternalError("forward of a micro-batch already in flight");
  InFlight& f = it->second;
  ASSIGN_OR_RETURN(f.acts, Acquire(a.chunk));
  peak_live_ = std::max(peak_live_, static_cast<int>(in_flight_.size()));

  model::StageInput input;
  if (k == 0) input.tokens = mb.tokens;
  if (k == num_model_chunks_ - 1) input.targets = mb.targets;
  if (k > 0) {
    RETURN_IF_ERROR(Receive(/*activation=*/true, {step, a.micro_batch, k}, shape, times));
    input.activation = recv_device_.data();
  }
  if (step == forward_delay_step_ && a.micro_batch == 0 && a.chunk == 0) {
    absl::SleepFor(forward_delay_);  // test-only: stuck in compute (SetTestOnlyForwardDelay)
  }
  const auto compute = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(stage.Forward(*f.acts, input));
  if (k == num_model_chunks_ - 1) {
    ASSIGN_OR_RETURN(double loss, f.acts->MeanLoss());
    if (static_cast<int>(losses_.size()) <= a.micro_batch) losses_.resize(a.micro_batch + 1);
    losses_[a.micro_batch] = loss;
  }
  const double forward = Since(compute);
  times->compute += forward;
  times->forward += forward;
  if (k < num_model_chunks_ - 1) {
    ASSIGN_OR_RETURN(f.activation_host, staging_->ToHost(f.acts->output(), int64_t{b_} * T_ * C));
    ASSIGN_OR_RETURN(f.activation_sent,
                     links_->SendActivation({step, a.micro_batch, k + 1}, shape,
                                            absl::MakeConstSpan(f.activation_host.host())));
  }
  return absl::OkStatus();
}

absl::Status StageExecutor::BackwardInput(int64_t step, const Action& a, StepTimes* times,
                                          bool send) {
  auto it = in_flight_.find({a.chunk, a.micro_batch});
  if (it == in_flight_.end()) return absl::InternalError("backward before forward");
  InFlight& f = it->second;
  model::GptStage& stage = *chunks_[a.chunk];
  const int k = ModelChunk(a.chunk);
  const std::vector<int64_t> shape = {b_, T_, stage.config().n_embd};
  const float* doutput = nullptr;
  if (k < num_model_chunks_ - 1) {
    RETURN_IF_ERROR(Receive(/*activation=*/false, {step, a.micro_batch, k}, shape, times));
    doutput = recv_device_.data();
  }
  const auto compute = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(stage.BackwardInput(*f.acts, doutput, loss_scale_));
  const double backward_input = Since(compute);
  times->compute += backward_input;
  times->backward_input += backward_input;
  return send ? SendInputGradient(step, a) : absl::OkStatus();
}

absl::Status StageExecutor::SendInputGradient(int64_t step, const Action& a) {
  const int k = ModelChunk(a.chunk);
  if (k == 0) return absl::OkStatus();  // the embedding's gradient goes nowhere
  auto it = in_flight_.find({a.chunk, a.micro_batch});
  if (it == in_flight_.end()) return absl::InternalError("input gradient of no forward");
  InFlight& f = it->second;
  const std::vector<int64_t> shape = {b_, T_, chunks_[a.chunk]->config().n_embd};
  ASSIGN_OR_RETURN(f.gradient_host,
                   staging_->ToHost(f.acts->input_grad(), int64_t{b_} * T_ * shape[2]));
  ASSIGN_OR_RETURN(f.gradient_sent,
                   links_->SendGradient({step, a.micro_batch, k - 1}, shape,
                                        absl::MakeConstSpan(f.gradient_host.host())));
  return absl::OkStatus();
}

absl::Status StageExecutor::BackwardWeight(const Action& a,
                                           const model::GptStage::GradReadyFn& ready,
                                           StepTimes* times) {
  auto it = in_flight_.find({a.chunk, a.micro_batch});
  if (it == in_flight_.end()) return absl::InternalError("weight backward before forward");
  const auto compute = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(chunks_[a.chunk]->BackwardWeight(*it->second.acts, ready));
  const double backward_weight = Since(compute);
  times->compute += backward_weight;
  times->backward_weight += backward_weight;
  return absl::OkStatus();
}

void StageExecutor::Retire(int chunk, int mb) {
  auto it = in_flight_.find({chunk, mb});
  draining_[chunk].push_back(std::move(it->second));
  in_flight_.erase(it);
}

absl::StatusOr<std::unique_ptr<model::StageActivations>> StageExecutor::Acquire(int chunk) {
  auto& draining = draining_[chunk];
  for (auto it = draining.begin(); it != draining.end(); ++it) {
    const bool done = (it->activation_sent == nullptr || it->activation_sent->Done()) &&
                      (it->gradient_sent == nullptr || it->gradient_sent->Done());
    if (done) {
      std::unique_ptr<model::StageActivations> acts = std::move(it->acts);
      draining.erase(it);  // the finished handles return at once
      return acts;
    }
  }
  if (!free_[chunk].empty()) {
    std::unique_ptr<model::StageActivations> acts = std::move(free_[chunk].back());
    free_[chunk].pop_back();
    return acts;
  }
  return chunks_[chunk]->NewActivations(b_, T_);
}

absl::Status StageExecutor::DrainAll(StepTimes* times) {
  const auto start = std::chrono::steady_clock::now();
  for (size_t c = 0; c < draining_.size(); ++c) {
    for (InFlight& f : draining_[c]) {
      if (f.activation_sent != nullptr) RETURN_IF_ERROR(links_->Wait(f.activation_sent));
      if (f.gradient_sent != nullptr) RETURN_IF_ERROR(links_->Wait(f.gradient_sent));
      free_[c].push_back(std::move(f.acts));
    }
    draining_[c].clear();
  }
  times->send += Since(start);
  return absl::OkStatus();
}

}  // namespace dtrain::parallel
