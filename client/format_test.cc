#include "client/format.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace dtrain {
namespace client {
namespace {

StepMetrics Step(int64_t step, double loss, double tokens_per_s, int64_t time_ms) {
  StepMetrics m;
  m.set_step(step);
  m.set_loss(loss);
  m.set_tokens_per_s(tokens_per_s);
  m.set_time_unix_ms(time_ms);
  return m;
}

Job RunningJob() {
  Job job;
  job.set_id("job-000003");
  job.set_state(RUNNING);
  job.mutable_spec()->set_steps(200);
  job.mutable_spec()->set_batch_size(8);
  job.mutable_spec()->mutable_model()->set_context(128);
  *job.mutable_latest() = Step(40, 2.93124, 4120.4, 0);
  return job;
}

TEST(FormatThousands, GroupsDigitsInThrees) {
  EXPECT_EQ(FormatThousands(0), "0");
  EXPECT_EQ(FormatThousands(999), "999");
  EXPECT_EQ(FormatThousands(4120), "4,120");
  EXPECT_EQ(FormatThousands(1234567), "1,234,567");
  EXPECT_EQ(FormatThousands(-1234567), "-1,234,567");
  EXPECT_EQ(FormatThousands(std::numeric_limits<int64_t>::min()), "-9,223,372,036,854,775,808");
}

TEST(FormatEta, MinutesSecondsUnderAnHourHoursAbove) {
  EXPECT_EQ(FormatEta(0), "0:00");
  EXPECT_EQ(FormatEta(41.6), "0:42");
  EXPECT_EQ(FormatEta(605), "10:05");
  EXPECT_EQ(FormatEta(3723), "1:02:03");
}

TEST(FormatEta, UnknownIsDashes) {
  EXPECT_EQ(FormatEta(-1), "--:--");
  EXPECT_EQ(FormatEta(std::nan("")), "--:--");
  EXPECT_EQ(FormatEta(std::numeric_limits<double>::infinity()), "--:--");
}

TEST(FormatAge, ShortUnits) {
  const absl::Time now = absl::FromUnixSeconds(1000000);
  EXPECT_EQ(FormatAge(now - absl::Milliseconds(400), now), "0.4s");
  EXPECT_EQ(FormatAge(now - absl::Seconds(12), now), "12s");
  EXPECT_EQ(FormatAge(now - absl::Seconds(185), now), "3m05s");
  EXPECT_EQ(FormatAge(now - absl::Minutes(130), now), "2h10m");
  EXPECT_EQ(FormatAge(now - absl::Hours(75), now), "3d");
  EXPECT_EQ(FormatAge(absl::UnixEpoch(), now), "never");
  // A clock slightly ahead of ours is not a negative age.
  EXPECT_EQ(FormatAge(now + absl::Seconds(1), now), "0.0s");
}

TEST(ProgressLine, RunningShowsStepLossRateEta) {
  EXPECT_EQ(ProgressLine(RunningJob(), 42.0),
            "job-000003 RUNNING step 40/200 loss 2.9312 4,120 tok/s ETA 0:42");
}

TEST(ProgressLine, UnknownEtaIsDashes) {
  EXPECT_EQ(ProgressLine(RunningJob(), std::nullopt),
            "job-000003 RUNNING step 40/200 loss 2.9312 4,120 tok/s ETA --:--");
}

TEST(ProgressLine, AStepWithAnEvaluationShowsItsValLoss) {
  Job job = RunningJob();
  job.mutable_latest()->set_val_loss(3.125);
  EXPECT_EQ(ProgressLine(job, 42.0),
            "job-000003 RUNNING step 40/200 loss 2.9312 val_loss 3.1250 4,120 tok/s ETA 0:42");
}

TEST(JobDetail, ValidationLineShowsTheLastAndBestEvaluation) {
  Job job = RunningJob();
  EvalSpec* eval = job.mutable_spec()->mutable_eval();
  eval->set_dataset("/data/val.bin");
  eval->set_every_steps(10);
  eval->set_batches(4);
  const absl::Time now = absl::FromUnixSeconds(2000000);
  EXPECT_NE(JobDetail(job, now).find("validation: every 10 steps on /data/val.bin (4 batches)\n"),
            std::string::npos)
      << JobDetail(job, now);
  job.mutable_validation()->set_step(40);
  job.mutable_validation()->set_val_loss(3.5);
  job.mutable_validation()->set_best_step(30);
  job.mutable_validation()->set_best_val_loss(3.25);
  eval->mutable_early_stopping()->set_patience(2);
  job.set_end_reason(END_EARLY_STOPPED);
  const std::string detail = JobDetail(job, now);
  EXPECT_NE(detail.find("(4 batches); val_loss 3.5000 at step 40, best 3.2500 at step 30; early "
                        "stopping: patience 2, min_delta 0; stopped early\n"),
            std::string::npos)
      << detail;
}

TEST(ProgressLine, NotRunningShowsStateAndReason) {
  Job job;
  job.set_id("job-000004");
  job.set_state(QUEUED);
  job.set_reason("waiting for 2 idle workers (1 idle)");
  EXPECT_EQ(ProgressLine(job, std::nullopt),
            "job-000004 QUEUED: waiting for 2 idle workers (1 idle)");
  job.clear_reason();
  EXPECT_EQ(ProgressLine(job, std::nullopt), "job-000004 QUEUED");
}

TEST(StepRate, UsesStepTimestamps) {
  JobSpec spec;
  spec.set_steps(100);
  StepRate rate;
  EXPECT_FALSE(rate.EtaSeconds(spec).has_value());
  rate.Add(Step(10, 3.0, 0, 100000));
  rate.Add(Step(20, 2.9, 0, 105000));  // 0.5 s per step
  ASSERT_TRUE(rate.SecondsPerStep(spec).has_value());
  EXPECT_DOUBLE_EQ(*rate.SecondsPerStep(spec), 0.5);
  EXPECT_DOUBLE_EQ(*rate.EtaSeconds(spec), 40.0);  // 80 steps left
}

TEST(StepRate, FallsBackToTokensPerSecond) {
  JobSpec spec;
  spec.set_steps(10);
  spec.set_batch_size(4);
  spec.mutable_model()->set_context(100);  // seq_len 0 means context: 400 tokens a step
  StepRate rate;
  rate.Add(Step(2, 3.0, 800, 5000));
  EXPECT_DOUBLE_EQ(*rate.SecondsPerStep(spec), 0.5);
  EXPECT_DOUBLE_EQ(*rate.EtaSeconds(spec), 4.0);
}

TEST(StepRate, ReplayedStepsAreIgnoredAndWindowSlides) {
  JobSpec spec;
  spec.set_steps(100);
  StepRate rate(/*window=*/3);
  rate.Add(Step(1, 3.0, 0, 0 + 1));
  rate.Add(Step(2, 3.0, 0, 10001));  // a slow first step drops out of the window
  rate.Add(Step(3, 3.0, 0, 11001));
  rate.Add(Step(4, 3.0, 0, 12001));
  rate.Add(Step(3, 3.0, 0, 11001));  // replayed after a reconnect
  EXPECT_DOUBLE_EQ(*rate.SecondsPerStep(spec), 1.0);
}

TEST(SummaryLine, SucceededShowsLossFallAndOutput) {
  Job job = RunningJob();
  job.set_state(SUCCEEDED);
  job.mutable_latest()->set_step(200);
  job.mutable_latest()->set_loss(1.5);
  job.set_output("/runs/jobs/job-000003/model.safetensors");
  EXPECT_EQ(SummaryLine(job, 5.54521),
            "job-000003 SUCCEEDED: 200/200 steps, loss 5.5452 -> 1.5000, output "
            "/runs/jobs/job-000003/model.safetensors");
}

TEST(SummaryLine, FailedShowsStepAndReason) {
  Job job = RunningJob();
  job.set_state(FAILED);
  job.set_reason("worker w2 lost: no heartbeat for 3s");
  EXPECT_EQ(SummaryLine(job, 5.5),
            "job-000003 FAILED at step 40/200: worker w2 lost: no heartbeat for 3s; loss 5.5000 "
            "-> 2.9312");
}

TEST(SummaryLine, CancelledBeforeAnyStep) {
  Job job;
  job.set_id("job-000007");
  job.set_state(CANCELLED);
  job.set_reason("cancelled by user");
  EXPECT_EQ(SummaryLine(job, std::nullopt), "job-000007 CANCELLED: cancelled by user");
}

TEST(FormatTable, PadsColumnsWithoutTrailingSpaces) {
  EXPECT_EQ(FormatTable({"ID", "STATE"}, {{"w1", "IDLE"}, {"worker-22", "BUSY"}}),
            "ID         STATE\n"
            "w1         IDLE\n"
            "worker-22  BUSY\n");
}

TEST(FormatTable, EmptyRowsGiveTheHeader) {
  EXPECT_EQ(FormatTable({"ID", "STATE"}, {}), "ID  STATE\n");
}

TEST(WorkersTable, ShowsEveryColumn) {
  ListWorkersResponse r;
  WorkerInfo* w = r.add_workers();
  w->set_worker_id("w1");
  w->set_state(BUSY);
  w->mutable_device()->set_kind("cpu");
  w->mutable_device()->set_name("cpu (2 threads)");
  w->set_host_label("hostA");
  w->set_job_id("job-000001");
  const absl::Time now = absl::FromUnixSeconds(2000000);
  w->set_last_heartbeat_unix_ms(absl::ToUnixMillis(now - absl::Milliseconds(500)));
  w->add_allowed_roots("/srv/w1");
  w->add_allowed_roots("/datasets");
  WorkerInfo* lost = r.add_workers();
  lost->set_worker_id("w2");
  lost->set_state(LOST);
  lost->mutable_device()->set_kind("cuda");
  lost->set_last_heartbeat_unix_ms(absl::ToUnixMillis(now - absl::Seconds(30)));
  EXPECT_EQ(WorkersTable(r, now),
            "ID  STATE  DEVICE           HOST   JOB         HEARTBEAT  ROOTS\n"
            "w1  BUSY   cpu (2 threads)  hostA  job-000001  0.5s       /srv/w1,/datasets\n"
            "w2  LOST   cuda             -      -           30s        -\n");
}

TEST(JobsTable, ShowsStepLossLayout) {
  ListJobsResponse r;
  Job* job = r.add_jobs();
  *job = RunningJob();
  job->mutable_spec()->set_name("tiny");
  job->mutable_spec()->mutable_parallel()->set_pp(2);
  const absl::Time now = absl::FromUnixSeconds(2000000);
  job->set_submitted_unix_ms(absl::ToUnixMillis(now - absl::Seconds(65)));
  job->set_started_unix_ms(absl::ToUnixMillis(now - absl::Seconds(62)));
  EXPECT_EQ(JobsTable(r, now).substr(0, 79),
            "ID          STATE    NAME  STEP    LOSS    LAYOUT          SUBMITTED  STARTED  ");
  EXPECT_NE(JobsTable(r, now).find("1m05s ago  "), std::string::npos);
  EXPECT_NE(JobsTable(r, now).find("  -      1m02s     -\n"), std::string::npos)
      << JobsTable(r, now);
}

TEST(JobsTable, APriorityColumnWhereAJobHasOne) {
  ListJobsResponse r;
  Job* a = r.add_jobs();
  a->set_id("job-000002");
  a->set_state(QUEUED);
  a->mutable_spec()->set_name("urgent");
  a->mutable_spec()->set_priority(5);
  Job* b = r.add_jobs();
  b->set_id("job-000001");
  b->set_state(RUNNING);
  b->mutable_spec()->set_name("long");
  const std::string table = JobsTable(r, absl::Now());
  EXPECT_EQ(table.substr(0, table.find('\n')).substr(0, 43),
            "ID          STATE    NAME    PRIORITY  STEP")
      << table;
  EXPECT_NE(table.find("urgent  5         "), std::string::npos) << table;
  EXPECT_NE(table.find("long    0         "), std::string::npos) << table;
  b->mutable_spec()->set_priority(0);
  a->mutable_spec()->set_priority(0);
  EXPECT_EQ(JobsTable(r, absl::Now()).find("PRIORITY"), std::string::npos);
}

TEST(JobsTable, ReasonOnOneShortLineKeepingItsEnds) {
  ListJobsResponse r;
  Job* job = r.add_jobs();
  *job = RunningJob();
  const std::string path = "/srv/runs/" + std::string(200, 'x') + "/model.safetensors";
  job->set_reason("worker w4 stopped by SIGTERM; output " + path);
  const std::string table = JobsTable(r, absl::Now());
  const std::string row = table.substr(table.find('\n') + 1);
  EXPECT_EQ(row.size() - row.find("worker w4"), 121u) << row;  // 120 and the newline
  EXPECT_NE(row.find("worker w4 stopped by SIGTERM; output /srv/runs/xxx"), std::string::npos);
  EXPECT_NE(row.find(" ... xxxx"), std::string::npos) << row;
  EXPECT_NE(row.find("/model.safetensors\n"), std::string::npos) << row;

  job->set_reason("cannot place the job:\n  rank 0 needs 3.7 GiB\n  rank 1 needs 2.0 GiB\n");
  const std::string lines = JobsTable(r, absl::Now());
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 2) << lines;
  EXPECT_NE(lines.find("cannot place the job: | rank 0 needs 3.7 GiB | rank 1 needs 2.0 GiB\n"),
            std::string::npos)
      << lines;
}

TEST(StateText, DropsTheStateRepeatedInTheReason) {
  EXPECT_EQ(StateText(QUEUED, "queued; placing it now"), "QUEUED: placing it now");
  EXPECT_EQ(StateText(QUEUED, "queued"), "QUEUED");
  EXPECT_EQ(StateText(QUEUED, "queuedness"), "QUEUED: queuedness");
  EXPECT_EQ(StateText(RUNNING, ""), "RUNNING");
  EXPECT_EQ(StateText(FAILED, "worker w2 lost"), "FAILED: worker w2 lost");
}

TEST(JobReason, AQueuedJobSaysItsPlaceInTheQueueFirst) {
  Job job;
  job.set_state(QUEUED);
  job.set_reason("waiting for 1 idle worker; 0 idle, 4 busy, 0 lost");
  EXPECT_EQ(JobReason(job), job.reason());  // an older coordinator: no position
  job.set_queue_position(1);
  EXPECT_EQ(JobReason(job), "next in the queue; waiting for 1 idle worker; 0 idle, 4 busy, 0 lost");
  job.set_queue_position(41);
  EXPECT_EQ(StateText(job.state(), JobReason(job)),
            "QUEUED: position 41 in the queue; waiting for 1 idle worker; 0 idle, 4 busy, 0 lost");
  job.set_state(RUNNING);  // a stale position is not shown
  EXPECT_EQ(JobReason(job), job.reason());
}

TEST(FormatSpan, ShortUnits) {
  EXPECT_EQ(FormatSpan(absl::Seconds(-3)), "0.0s");
  EXPECT_EQ(FormatSpan(absl::Seconds(185)), "3m05s");
}

TEST(JobDuration, EndedMinusStartedOrSoFar) {
  Job job;
  const absl::Time now = absl::FromUnixSeconds(5000);
  EXPECT_EQ(JobDuration(job, now), "-");
  job.set_started_unix_ms(absl::ToUnixMillis(now - absl::Seconds(100)));
  EXPECT_EQ(JobDuration(job, now), "1m40s");
  job.set_ended_unix_ms(absl::ToUnixMillis(now - absl::Seconds(40)));
  EXPECT_EQ(JobDuration(job, now), "1m00s");
}

TEST(JobDetail, ShowsTimesCheckpointRedoAndOutputHost) {
  Job job = RunningJob();
  const absl::Time now = absl::FromUnixSeconds(2000000);
  job.set_submitted_unix_ms(absl::ToUnixMillis(now - absl::Seconds(70)));
  job.set_started_unix_ms(absl::ToUnixMillis(now - absl::Seconds(65)));
  job.mutable_spec()->mutable_checkpoint()->set_dir("ckpt");
  job.mutable_spec()->mutable_checkpoint()->set_interval_steps(10);
  job.mutable_checkpoint()->set_dir("/srv/ckpt/job-000003");
  job.mutable_checkpoint()->set_host("hostA");
  job.mutable_checkpoint()->set_last_sealed_step(30);
  job.set_resumed_from_step(20);
  job.mutable_spec()->set_resume_from("job-000001");
  job.set_output("/srv/ckpt/job-000003/model.safetensors");
  job.set_output_host("hostA");
  const std::string detail = JobDetail(job, now);
  EXPECT_NE(detail.find("duration:  1m05s so far\n"), std::string::npos) << detail;
  EXPECT_NE(detail.find("started:   "), std::string::npos) << detail;
  EXPECT_EQ(detail.find("ended:"), std::string::npos) << detail;
  EXPECT_NE(detail.find("resumed:   from step 20 of job-000001\n"), std::string::npos) << detail;
  EXPECT_NE(detail.find("checkpoint: /srv/ckpt/job-000003 on hostA, every 10 steps\n"),
            std::string::npos)
      << detail;
  job.mutable_checkpoint()->set_dir_bytes(int64_t{25} << 19);  // 12.5 MiB
  EXPECT_NE(JobDetail(job, now).find(
                "checkpoint: /srv/ckpt/job-000003 on hostA, every 10 steps, 12.5 MiB on disk\n"),
            std::string::npos)
      << JobDetail(job, now);
  job.mutable_checkpoint()->clear_dir_bytes();
  EXPECT_NE(detail.find("sealed:    step 30; a resume would redo 10 steps after it\n"),
            std::string::npos)
      << detail;
  EXPECT_EQ(detail.find("skipped:"), std::string::npos) << detail;
  // A step newer than every sealed one that every rank skipped (a full disk) is named.
  job.mutable_checkpoint()->set_last_skipped_step(35);
  job.mutable_checkpoint()->set_last_skip_reason("rank 1: no space left on /srv/ckpt");
  EXPECT_NE(JobDetail(job, now).find("skipped:   step 35: rank 1: no space left on /srv/ckpt\n"),
            std::string::npos)
      << JobDetail(job, now);
  job.mutable_checkpoint()->set_last_skipped_step(25);  // sealed since: nothing to say
  EXPECT_EQ(JobDetail(job, now).find("skipped:"), std::string::npos);
  job.mutable_checkpoint()->clear_last_skipped_step();
  EXPECT_NE(detail.find("output:    /srv/ckpt/job-000003/model.safetensors on hostA\n"),
            std::string::npos)
      << detail;
  EXPECT_NE(detail.find(" (1m10s ago)\n"), std::string::npos) << detail;  // no owner: nothing
  job.set_owner("alice");
  EXPECT_NE(JobDetail(job, now).find(" (1m10s ago) by alice\n"), std::string::npos)
      << JobDetail(job, now);
}

TEST(JobDetail, DeviceLineWhenTheJobAsksForHardwareOrPrecision) {
  Job job;
  job.set_id("job-000001");
  job.mutable_spec()->set_device("auto");
  job.mutable_spec()->set_matmul_precision("fp32");
  EXPECT_EQ(JobDetail(job, absl::Now()).find("device:"), std::string::npos);
  job.mutable_spec()->set_device("cuda");
  job.mutable_spec()->set_matmul_precision("bf16");
  EXPECT_NE(JobDetail(job, absl::Now()).find("device:    cuda, matmul bf16\n"), std::string::npos)
      << JobDetail(job, absl::Now());
  job.mutable_spec()->set_device("cpu");
  job.mutable_spec()->clear_matmul_precision();  // a job stored before the field: fp32
  EXPECT_NE(JobDetail(job, absl::Now()).find("device:    cpu, matmul fp32\n"), std::string::npos);
}

TEST(JobDetail, StragglersLineSlowestFirst) {
  Job job = RunningJob();
  job.mutable_spec()->mutable_stragglers()->set_threshold(1.5);
  job.mutable_spec()->mutable_stragglers()->set_window_steps(20);
  job.mutable_spec()->mutable_stragglers()->set_policy("report");
  const absl::Time now = absl::FromUnixSeconds(2000000);
  EXPECT_EQ(JobDetail(job, now).find("stragglers:"), std::string::npos);  // none scored yet
  for (int rank : {0, 1}) {
    StragglerScore* s = job.add_stragglers();
    s->set_rank(rank);
    s->set_worker_id(rank == 0 ? "w1" : "w2");
    s->set_label(rank == 0 ? "dp0 pp0 tp0" : "dp0 pp1 tp0");
    s->set_score(rank == 0 ? 0.42 : 2.4);
    s->set_flagged(rank == 1);
    s->set_window_end_step(40);
  }
  EXPECT_EQ(StragglersText(job),
            "1 flagged over steps 21-40 (threshold 1.5x, policy report): rank 1 (w2, dp0 pp1 "
            "tp0) 2.4x FLAGGED; rank 0 (w1, dp0 pp0 tp0) 0.4x");
  EXPECT_NE(JobDetail(job, now).find("stragglers: 1 flagged over steps 21-40"), std::string::npos)
      << JobDetail(job, now);
}

TEST(JobDetail, CheckpointNotCreatedYetAndNoneWithoutADir) {
  Job job = RunningJob();
  EXPECT_EQ(JobDetail(job, absl::Now()).find("checkpoint:"), std::string::npos);
  job.mutable_spec()->mutable_checkpoint()->set_dir("/ckpt");
  EXPECT_NE(JobDetail(job, absl::Now())
                .find("checkpoint: /ckpt/job-000003 (not created yet), at the end only\n"),
            std::string::npos);
}

TEST(JobDetail, ListsEachRecoveryWithItsPhases) {
  Job job = RunningJob();
  job.mutable_spec()->mutable_fault_tolerance()->set_max_restarts(3);
  job.mutable_spec()->mutable_fault_tolerance()->set_on_worker_loss("shrink");
  job.mutable_spec()->mutable_fault_tolerance()->set_wait_for("60s");
  Recovery* r = job.add_recoveries();
  r->set_number(1);
  r->set_cause("worker w4 (dp1 pp1 tp0) stopped answering: ...\n  then worker w3 failed");
  r->set_last_step(14);
  r->mutable_layout()->set_dp(1);
  r->mutable_layout()->set_pp(2);
  r->add_workers("w1");
  r->add_workers("w2");
  r->set_resumed_from_step(10);
  r->set_steps_redone(4);
  r->set_detect_ms(1500);
  r->set_stop_ms(10);
  r->set_place_ms(20);
  r->set_load_ms(600);
  r->set_first_step_ms(400);
  r->set_done(true);
  const std::string detail = JobDetail(job, absl::Now());
  EXPECT_NE(detail.find("recoveries (fault_tolerance: max_restarts 3, shrink, wait_for 60s):\n"),
            std::string::npos)
      << detail;
  EXPECT_NE(detail.find(" at step 14: worker w4 (dp1 pp1 tp0) stopped answering: ...\n"
                        "     on dp=1 pp=2 tp=1 (w1, w2); resumed from step 10, 4 steps redone\n"
                        "     detect 1.5s, stop 0.0s, place 0.0s, load 0.6s, first step 0.4s\n"),
            std::string::npos)
      << detail;
  ListJobsResponse list;
  *list.add_jobs() = job;
  EXPECT_NE(JobsTable(list, absl::Now()).find("RUNNING (1 recovery)"), std::string::npos);
}

// A placed recovery on `dp` x pp=2, as the coordinator records it.
Recovery* AddRecovery(Job* job, int dp, bool grow) {
  Recovery* r = job->add_recoveries();
  r->set_number(job->recoveries_size());
  r->set_grow(grow);
  r->mutable_layout()->set_dp(dp);
  r->mutable_layout()->set_pp(2);
  r->mutable_layout()->set_tp(1);
  for (int i = 0; i < dp * 2; ++i) r->add_workers(absl::StrCat("w", i + 1));
  return r;
}

TEST(CurrentLayoutText, TheLayoutTheJobRunsOnNow) {
  Job job = RunningJob();
  job.mutable_spec()->mutable_parallel()->set_dp(2);
  job.mutable_spec()->mutable_parallel()->set_pp(2);
  job.mutable_spec()->mutable_parallel()->set_tp(1);
  ListJobsResponse list;
  const auto cell = [&] {
    *list.mutable_jobs(0) = job;
    return JobsTable(list, absl::Now());
  };
  list.add_jobs();
  EXPECT_EQ(CurrentLayoutText(job), "dp=2 pp=2 tp=1 (4 workers)");
  EXPECT_NE(cell().find("  dp=2 pp=2 tp=1  "), std::string::npos) << cell();

  AddRecovery(&job, 1, false);  // a kill -9 shrank it
  EXPECT_EQ(CurrentLayoutText(job),
            "dp=1 pp=2 tp=1 (2 workers; shrunk from dp=2 pp=2 tp=1 by recovery 1)");
  EXPECT_NE(JobDetail(job, absl::Now())
                .find("layout:    dp=1 pp=2 tp=1 (2 workers; shrunk from dp=2 pp=2 tp=1 by "
                      "recovery 1)\n"),
            std::string::npos)
      << JobDetail(job, absl::Now());
  EXPECT_NE(cell().find("  dp=1 pp=2 tp=1 (shrunk)  "), std::string::npos) << cell();

  // Another failure on the shrunk layout: still the layout recovery 1 moved it to.
  AddRecovery(&job, 1, false);
  EXPECT_EQ(CurrentLayoutText(job),
            "dp=1 pp=2 tp=1 (2 workers; shrunk from dp=2 pp=2 tp=1 by recovery 1)");
  // A third still waiting for workers (no layout yet): the last run's layout.
  job.add_recoveries()->set_number(3);
  EXPECT_EQ(CurrentLayoutText(job),
            "dp=1 pp=2 tp=1 (2 workers; shrunk from dp=2 pp=2 tp=1 by recovery 1)");

  job.mutable_recoveries()->RemoveLast();
  AddRecovery(&job, 2, true);  // grown back
  EXPECT_EQ(CurrentLayoutText(job), "dp=2 pp=2 tp=1 (4 workers)");
  EXPECT_NE(cell().find("  dp=2 pp=2 tp=1  "), std::string::npos) << cell();
}

TEST(StageCutText, TheLayersOfEachStageAndWhoCutThem) {
  Job job = RunningJob();
  job.clear_placement();
  EXPECT_EQ(StageCutText(job), "");
  for (int pp = 0; pp < 3; ++pp) {
    for (int tp = 0; tp < 2; ++tp) {
      RankAssignment* r = job.mutable_placement()->add_ranks();
      r->set_pp_rank(pp);
      r->set_tp_rank(tp);
      r->set_num_layers(pp == 1 ? 1 : 4);
    }
  }
  EXPECT_EQ(StageCutText(job), "4,1,4 (the plan's balance)");
  for (int l : {4, 1, 4}) job.mutable_spec()->mutable_parallel()->add_stage_layers(l);
  EXPECT_EQ(StageCutText(job), "4,1,4 (parallel.stage_layers)");
  Recovery* r = job.add_recoveries();
  r->set_number(2);
  for (int l : {4, 1, 4}) r->add_rebalance_to(l);
  EXPECT_EQ(StageCutText(job), "4,1,4 (rebalanced by recovery 2)");
  EXPECT_NE(JobDetail(job, absl::Now()).find("\ncut:       4,1,4 (rebalanced by recovery 2)\n"),
            std::string::npos)
      << JobDetail(job, absl::Now());
}

TEST(CheckpointsText, NoLocationAndNoSealedStep) {
  ListCheckpointsResponse r;
  EXPECT_EQ(CheckpointsText("job-000004", r, absl::Now()),
            "job-000004 checkpoints: no location reported yet (the job has not started)\n"
            "no sealed step yet\n");
}

TEST(DiagnosisText, SummaryOtherFindingsAndOneRowPerRank) {
  JobDiagnosis d;
  d.set_job_id("job-000003");
  d.set_summary(
      "root: rank 1 (w2, dp0 pp1 tp0) did not answer in 2s; rank 0 waits on its gradient");
  d.add_findings("rank 1 on w2 (dp0 pp1 tp0) did not answer in 2s: process alive?");
  d.add_findings(d.summary());
  d.set_gather_seconds(2.01);
  d.set_wait_threshold_seconds(1);
  RankState* r0 = d.add_ranks();
  r0->set_rank(0);
  r0->set_worker_id("w1");
  r0->set_label("dp0 pp0 tp0");
  r0->set_answered(true);
  r0->set_doing("waits for rank 1's gradient (step 12, micro-batch 3) for 4.2 s");
  RankState* r1 = d.add_ranks();
  r1->set_rank(1);
  r1->set_worker_id("w2");
  r1->set_label("dp0 pp1 tp0");
  r1->set_error("no answer by the deadline");
  EXPECT_EQ(DiagnosisText(d),
            "job-000003: root: rank 1 (w2, dp0 pp1 tp0) did not answer in 2s; rank 0 waits on "
            "its gradient\n"
            "  rank 1 on w2 (dp0 pp1 tp0) did not answer in 2s: process alive?\n"
            "RANK  WORKER  LAYOUT       NOW\n"
            "0     w1      dp0 pp0 tp0  waits for rank 1's gradient (step 12, micro-batch 3) for "
            "4.2 s\n"
            "1     w2      dp0 pp1 tp0  did not answer (no answer by the deadline)\n"
            "asked 2 ranks in 2.0 s; waits under 1.0 s are normal traffic\n");
}

TEST(LogEntryLine, RankWorkerLevelText) {
  LogEntry e;
  e.set_rank(2);
  e.set_worker_id("w3");
  e.set_severity(LOG_WARNING);
  e.set_text("slow peer");
  const std::string line = LogEntryLine(e);
  EXPECT_NE(line.find(" rank 2 (w3) WARNING slow peer"), std::string::npos) << line;
  e.set_rank(-1);
  e.set_severity(LOG_INFO);
  EXPECT_NE(LogEntryLine(e).find(" coordinator INFO slow peer"), std::string::npos);
}

TEST(KeepsRunningNote, SaysHowToCancel) {
  EXPECT_EQ(KeepsRunningNote("job-000012", ""),
            "job-000012 keeps running; stop it with: dtrain cancel job-000012");
  EXPECT_EQ(KeepsRunningNote("job-000012", "h:1"),
            "job-000012 keeps running; stop it with: dtrain --coordinator=h:1 cancel job-000012");
}

TEST(JobDetail, ListsPlacementAndHistory) {
  Job job = RunningJob();
  RankAssignment* r = job.mutable_placement()->add_ranks();
  r->set_worker_id("w1");
  r->set_worker_address("127.0.0.1:7101");
  r->set_first_layer(0);
  r->set_num_layers(2);
  StateChange* c = job.add_history();
  c->set_state(QUEUED);
  const std::string detail = JobDetail(job, absl::Now());
  EXPECT_NE(detail.find("state:     RUNNING"), std::string::npos) << detail;
  EXPECT_NE(detail.find("step:      40/200, loss 2.9312, 4,120 tok/s"), std::string::npos)
      << detail;
  EXPECT_NE(detail.find("dp0 pp0 tp0  layers 0-1  w1 (127.0.0.1:7101)"), std::string::npos)
      << detail;
  EXPECT_NE(detail.find("QUEUED"), std::string::npos) << detail;
}

TEST(SplitProblems, NewlineSeparatedWithHeader) {
  EXPECT_EQ(SplitProblems("invalid job spec (2 problems):\n  - model.n_head: must divide "
                          "n_embd\n  - parallel.tp: 3 does not divide n_head 4\n"),
            (std::vector<std::string>{"model.n_head: must divide n_embd",
                                      "parallel.tp: 3 does not divide n_head 4"}));
}

TEST(SplitProblems, SemicolonSeparated) {
  EXPECT_EQ(SplitProblems("steps: must be > 0; batch_size: must be > 0"),
            (std::vector<std::string>{"steps: must be > 0", "batch_size: must be > 0"}));
}

TEST(SplitProblems, OneProblem) {
  EXPECT_EQ(SplitProblems("spec_json: unknown field \"foo\""),
            (std::vector<std::string>{"spec_json: unknown field \"foo\""}));
}

TEST(ToJsonLine, ProtoFieldNamesDefaultsAndEnumNames) {
  Job job;
  job.set_id("job-000001");
  job.set_state(QUEUED);
  const std::string json = ToJsonLine(job);
  EXPECT_NE(json.find("\"id\":\"job-000001\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"state\":\"QUEUED\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"submitted_unix_ms\":\"0\""), std::string::npos) << json;
  EXPECT_EQ(json.find('\n'), std::string::npos) << json;
}

TEST(WatchJsonLine, StepIsCompactWithNumbersNotStrings) {
  JobUpdate u;
  u.mutable_job()->set_id("job-000003");
  u.mutable_job()->mutable_spec()->set_name("not printed");
  StepMetrics* m = u.mutable_step();
  m->set_step(12);
  m->set_loss(2.5);
  m->set_grad_norm(0.125);
  m->set_learning_rate(0.0006);
  m->set_tokens_per_s(4120.5);
  m->set_time_unix_ms(1714572207120);
  EXPECT_EQ(WatchJsonLine(u),
            "{\"type\":\"step\",\"job\":\"job-000003\",\"step\":12,\"loss\":2.5,"
            "\"grad_norm\":0.125,\"lr\":0.0006,\"tokens_per_s\":4120.5,"
            "\"time_unix_ms\":1714572207120}");
}

TEST(WatchJsonLine, AQueuedJobsNewPlaceIsAJobLine) {
  JobUpdate u;
  u.mutable_job()->set_id("job-000011");
  u.mutable_job()->set_state(QUEUED);
  u.mutable_job()->set_queue_position(2);
  EXPECT_EQ(WatchJsonLine(u),
            R"({"type":"job","job":"job-000011","state":"QUEUED","queue_position":2})");
}

TEST(WatchJsonLine, AStepWithAnEvaluationHasItsValLoss) {
  JobUpdate u;
  u.mutable_job()->set_id("job-000003");
  u.mutable_step()->set_step(10);
  EXPECT_EQ(WatchJsonLine(u).find("val_loss"), std::string::npos) << WatchJsonLine(u);
  u.mutable_step()->set_val_loss(3.25);
  EXPECT_NE(WatchJsonLine(u).find(",\"val_loss\":3.25}"), std::string::npos) << WatchJsonLine(u);
}

TEST(WatchJsonLine, NonFiniteNumbersAreNull) {
  JobUpdate u;
  u.mutable_job()->set_id("job-000003");
  u.mutable_step()->set_step(1);
  u.mutable_step()->set_loss(std::nan(""));
  u.mutable_step()->set_grad_norm(INFINITY);
  EXPECT_NE(WatchJsonLine(u).find("\"loss\":null,\"grad_norm\":null,"), std::string::npos)
      << WatchJsonLine(u);
}

TEST(WatchJsonLine, StateAndEventTextIsEscaped) {
  JobUpdate u;
  u.mutable_job()->set_id("job-000003");
  u.mutable_job()->set_output("/srv/\"x\"/model.safetensors");
  u.mutable_job()->mutable_latest()->set_step(40);
  u.mutable_state_change()->set_state(FAILED);
  u.mutable_state_change()->set_reason("worker w2 lost\nno heartbeat");
  u.mutable_state_change()->set_time_unix_ms(5);
  EXPECT_EQ(WatchJsonLine(u),
            "{\"type\":\"state\",\"job\":\"job-000003\",\"state\":\"FAILED\","
            "\"reason\":\"worker w2 lost\\nno heartbeat\",\"time_unix_ms\":5,\"step\":40,"
            "\"output\":\"/srv/\\\"x\\\"/model.safetensors\"}");
  JobUpdate e;
  e.mutable_job()->set_id("job-000003");
  e.set_event("loaded \"data\"");
  EXPECT_EQ(WatchJsonLine(e),
            "{\"type\":\"event\",\"job\":\"job-000003\",\"text\":\"loaded \\\"data\\\"\"}");
}

}  // namespace
}  // namespace client
}  // namespace dtrain
