// `dtrain plan` as a specification: the report's key lines for 1F1B, ZB-H1 and interleaved
// layouts, hosts in the rank table, --json, and exit 2 with the reason for every job that
// cannot run (a bad spec, a schedule the layout cannot run, too few workers, a deadlock).
#include "client/plan.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "plan/job_plan.h"

namespace dtrain {
namespace client {
namespace {

using pipeline::Action;
using pipeline::ActionType;
using ::testing::HasSubstr;
using ::testing::Not;

// 8 layers of width 64, 16 sequences of 32 tokens per step in micro-batches of 2.
std::string SpecJson(const std::string& parallel, int micro_batch_size = 2) {
  return absl::StrCat(
      R"({"name": "plan-test", "model": {"vocab_size": 256, "context": 32, "n_layer": 8,)",
      R"( "n_head": 4, "n_embd": 64}, "dataset": "data/demo.txt", "steps": 10,)",
      R"( "checkpoint": {"dir": "runs/plan-test"},)", R"( "batch_size": 16, "micro_batch_size": )",
      micro_batch_size, R"(, "parallel": )", parallel, "}");
}

std::string WriteSpec(const std::string& name, const std::string& json) {
  const std::string path = absl::StrCat(testing::TempDir(), name);
  std::ofstream(path) << json;
  return path;
}

struct CliRun {
  int code;
  std::string out, err;
};

CliRun Dtrain(const std::vector<std::string>& args) {
  absl::StatusOr<Invocation> inv = ParseArguments(args, nullptr);
  if (!inv.ok()) return {kExitUsage, "", std::string(inv.status().message())};
  std::unique_ptr<CoordinatorStub> stub = CoordinatorStub::Connect("127.0.0.1:1", {});
  std::ostringstream out, err;
  Output output{out, err, false};
  const int code = RunInvocation(*inv, *stub, output);
  return {code, out.str(), err.str()};
}

JobPlan Validated(const std::string& json) {
  absl::StatusOr<JobPlan> spec = plan::ParseJobPlanJson(json);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobPlan{};
}

TEST(Plan, OneWorkerIsOneRankOnW0) {
  const std::string path = WriteSpec("one.json", SpecJson(R"({"pp": 1})"));
  const CliRun r = Dtrain({"plan", path});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("layout: dp=1 pp=1 tp=1 (1 rank), schedule"));
  EXPECT_THAT(r.out, HasSubstr("workers: 1 hypothetical (w0) on 1 host\n"));
  EXPECT_THAT(r.out, HasSubstr("\ndevice: auto, matmul fp32\n"));
}

// `dtrain plan` of a one-worker spec with `field` (a JSON member) added, written as `name`.
CliRun PlanOfOneWorkerWith(const std::string& name, const std::string& field) {
  std::string json = SpecJson(R"({"pp": 1})");
  json.insert(json.size() - 1, absl::StrCat(", ", field));
  return Dtrain({"plan", WriteSpec(name, json)});
}

TEST(Plan, ABf16JobIsPlannedForCuda) {
  const CliRun r = PlanOfOneWorkerWith("bf16.json", R"("matmul_precision": "bf16")");
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\ndevice: cuda, matmul bf16\n"));
  // Its CUDA scratch holds bf16 copies of the largest left and right GEMM operands (N=16*32
  // rows by 4C=256 or V=256 columns: 128 Ki elements, 2 bytes each) and the partial column sums
  // (8 chunks of 64 rows x 4C floats): 512 + 8 KiB.
  EXPECT_THAT(r.out, HasSubstr("CUDA SCRATCH  CHECKPOINT  TOTAL\n0      "));
  EXPECT_THAT(r.out, HasSubstr("  520.0 KiB     "));
  // A checkpoint's files (the 1.6 MiB of parameters and their m and v) are host memory on a
  // GPU worker: shown, not in the device's total.
  EXPECT_THAT(r.out, HasSubstr("  520.0 KiB     4.8 MiB     36.6 MiB\n"));
  EXPECT_THAT(r.out, HasSubstr("CUDA scratch: partial column sums and bf16 copies of GEMM "
                               "operands; checkpoint: its files in host memory from the snapshot "
                               "until written, not in the total (host memory on a GPU worker))"));
}

TEST(Plan, ACpuJobHasNoCudaScratch) {
  const CliRun r = PlanOfOneWorkerWith("cpu.json", R"("device": "cpu")");
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("COMMUNICATION  CHECKPOINT  TOTAL\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("CUDA")));
  // On a CPU worker a checkpoint's snapshot is in the memory the rank is placed against.
  EXPECT_THAT(r.out, HasSubstr("  4.8 MiB     40.9 MiB\n"));
  EXPECT_THAT(r.out, HasSubstr("checkpoint: its files in host memory from the snapshot until "
                               "written)\n"));
}

TEST(Plan, OneFOneBReportHasLayoutRanksStagesTimelineAndBubble) {
  const std::string path = WriteSpec("1f1b.json", SpecJson(R"({"pp": 4})"));
  const CliRun r = Dtrain({"plan", path});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("layout: dp=1 pp=4 tp=1 (4 ranks), schedule 1f1b, 8 micro-batches "
                               "of 2 sequences per replica per step"));
  EXPECT_THAT(r.out, HasSubstr("workers: 4 hypothetical (w0..w3) on 1 host\n"));
  EXPECT_THAT(r.out, HasSubstr("RANK  DP  PP  TP  WORKER  HOST  LAYERS  MEMORY\n"
                               "0     0   0   0   w0      h0    0-1     7.4 MiB\n"));
  // Each rank's memory, every term (plan/memory.h): stage 0 keeps 4 micro-batches alive; with
  // device "auto" a rank may run on CUDA, whose backend keeps partial column sums (b=2 T=32:
  // 1 chunk of 64 rows x 2C=128 floats), or on a CPU, where a checkpoint's files (its
  // parameters, m and v) count.
  EXPECT_THAT(r.out, HasSubstr("STAGE  PARAMETERS  GRADIENTS  OPTIMIZER  ACTIVATIONS  "
                               "COMMUNICATION  CUDA SCRATCH  CHECKPOINT  TOTAL\n"
                               "0      462.5 KiB   462.5 KiB  925.0 KiB  4.1 MiB      128.0 KiB"
                               "      1.0 KiB       1.4 MiB     7.4 MiB\n"));
  EXPECT_THAT(r.out, HasSubstr("; CUDA scratch: partial column sums; checkpoint: "));
  EXPECT_THAT(r.out, HasSubstr("STAGE  LAYERS  COST\n0      0-1     2.00\n"));
  EXPECT_THAT(r.out, HasSubstr("stage 0 |F0-"));
  EXPECT_THAT(r.out, HasSubstr("stage 3 |...."));  // the last stage waits for three forwards
  EXPECT_THAT(r.out, HasSubstr("\n1F1B: textbook theory (p-1)/(m+p-1) = 3/11 = 27.3% (input "
                               "gradients sent after the weight gradients)\n"));
  EXPECT_THAT(r.out, HasSubstr("STAGE  BUSY   BUBBLE  PEAK LIVE  PEAK LAYERS  PEAK ACTIVATIONS\n"));
  // One activation estimate (plan/memory.h's): the schedule's PEAK ACTIVATIONS of stage 0 is
  // the memory table's ACTIVATIONS, 4.1 MiB for its 4 live micro-batches. Its bubble, 28.4%,
  // is the executor's (a backward's input gradient leaves before its weight gradients).
  EXPECT_THAT(r.out, HasSubstr("0      48.01  28.4%   4          8            4.1 MiB\n"));
  EXPECT_THAT(r.out, HasSubstr("(fp32; b=2 T=32 C=64 NH=4 tp=1; the last stage's logits "
                               "included)\n"));
}

TEST(Plan, PeakActivationsAreTheMemoryEstimateOfEveryStage) {
  for (const char* parallel :
       {R"({"pp": 4})", R"({"pp": 2, "tp": 2})", R"({"pp": 2, "schedule": "zb-h1"})",
        R"({"pp": 2, "schedule": "interleaved", "virtual_stages": 2})"}) {
    absl::StatusOr<Plan> plan = MakePlan(Validated(SpecJson(parallel)), {});
    ASSERT_TRUE(plan.ok()) << plan.status();
    PlanReport report;
    ASSERT_TRUE(
        google::protobuf::util::JsonStringToMessage(PlanJson(*plan, "x.json"), &report).ok());
    ASSERT_EQ(report.stages_size(), plan->job.stages_size());
    for (int s = 0; s < report.stages_size(); ++s) {
      EXPECT_EQ(report.stages(s).peak_activation_bytes(),
                plan->job.stages(s).memory().activations())
          << parallel << " stage " << s;
      EXPECT_GT(report.stages(s).peak_activation_bytes(), 0) << parallel;
    }
  }
}

TEST(Plan, SimulatedBubblesMatchTheScheduleOnEqualStages) {
  // With the head's cost the stages differ; compare the schedules on the same spec.
  auto bubble = [](const std::string& parallel) {
    absl::StatusOr<Plan> plan = MakePlan(Validated(SpecJson(parallel)), {});
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? plan->sim.bubble_fraction : 1.0;
  };
  const double one = bubble(R"({"pp": 4, "schedule": "1f1b"})");
  EXPECT_DOUBLE_EQ(bubble(R"({"pp": 4, "schedule": "gpipe"})"), one);
  // Half of 1F1B's at equal costs (plan/simulate_test.cc); the head makes the last stage longer.
  EXPECT_LT(bubble(R"({"pp": 4, "schedule": "zb-h1"})"), 0.75 * one);
  EXPECT_LT(bubble(R"({"pp": 2, "schedule": "interleaved", "virtual_stages": 2})"),
            bubble(R"({"pp": 2, "schedule": "1f1b"})"));
}

TEST(Plan, ZeroBubbleAndInterleavedTimelinesUseTheirLetters) {
  CliRun r = Dtrain({"plan", WriteSpec("zb.json", SpecJson(R"({"pp": 2, "schedule": "zb-h1"})"))});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("b input gradient = cost, w weight gradient = cost"));
  EXPECT_THAT(r.out, HasSubstr("bubble: 7.2% simulated overall (one step: 107.39 cost units)\n"
                               "1F1B: textbook theory (p-1)/(m+p-1) = 1/9 = 11.1% (input "
                               "gradients sent after the weight gradients); simulated on these "
                               "stages 10.2%\n"));
  EXPECT_THAT(r.out, HasSubstr("stage 1 |....F0--b0--F1--b1--w0--F2--b2--w1"));

  r = Dtrain({"plan", WriteSpec("il.json", SpecJson(R"({"pp": 2, "schedule": "interleaved",)"
                                                    R"( "virtual_stages": 2})"))});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("with 2 virtual stages"));
  EXPECT_THAT(r.out, HasSubstr("0     0   0   0   w0      h0    0-1,4-5  12.1 MiB\n"));
  EXPECT_THAT(r.out, HasSubstr("digits: micro-batch.chunk"));
  EXPECT_THAT(r.out, HasSubstr("stage 1 |..F0F1F0B0.1F1B1.1"));  // chunks when they fit
}

TEST(Plan, HostsSpreadTheWorkersAndKeepTensorGroupsTogether) {
  const std::string path = WriteSpec("hosts.json", SpecJson(R"({"dp": 2, "pp": 2, "tp": 2})", 4));
  const CliRun r = Dtrain({"plan", path, "--hosts=2"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("workers: 8 hypothetical (w0..w7) on 2 hosts; tensor-parallel "
                               "groups split across hosts: 0"));
  EXPECT_THAT(r.out, HasSubstr("1     0   0   1   w1      h0"));
  EXPECT_THAT(r.out, HasSubstr("7     1   1   1   w7      h1"));
  // 3 hosts of 3, 3 and 2 workers: after a pair from each, one pair has to span two hosts.
  EXPECT_THAT(Dtrain({"plan", path, "--hosts", "3"}).out,
              HasSubstr("on 3 hosts; tensor-parallel groups split across hosts: 1"));
  EXPECT_THAT(Dtrain({"plan", path, "--hosts", "4"}).out,
              HasSubstr("on 4 hosts; tensor-parallel groups split across hosts: 0"));
}

TEST(Plan, JsonIsOneObjectWithEveryStage) {
  const std::string path = WriteSpec("json.json", SpecJson(R"({"pp": 4, "schedule": "zb-h1"})"));
  const CliRun r = Dtrain({"plan", "--json", path});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  google::protobuf::Struct root;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &root).ok()) << r.out;
  const auto& f = root.fields();
  const auto& job = f.at("plan").struct_value().fields();
  EXPECT_EQ(job.at("micro_batches").number_value(), 8);
  EXPECT_EQ(job.at("spec")
                .struct_value()
                .fields()
                .at("parallel")
                .struct_value()
                .fields()
                .at("schedule")
                .string_value(),
            "zb-h1");
  EXPECT_EQ(job.at("stages").list_value().values_size(), 4);
  EXPECT_EQ(f.at("ranks").list_value().values_size(), 4);
  const auto& stages = f.at("stages").list_value();
  ASSERT_EQ(stages.values_size(), 4);
  const auto& stage0 = stages.values(0).struct_value().fields();
  EXPECT_EQ(stage0.at("timeline").list_value().values_size(), 24);  // 8 x F, B, W
  EXPECT_EQ(stage0.at("timeline")
                .list_value()
                .values(0)
                .struct_value()
                .fields()
                .at("action")
                .string_value(),
            "F0");
  EXPECT_NEAR(f.at("one_f_one_b_bubble").number_value(), 3.0 / 11, 1e-12);
  EXPECT_LT(f.at("bubble_fraction").number_value(), f.at("one_f_one_b_bubble").number_value());
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1);  // one line
}

TEST(Plan, RejectsABadSpecLikeSubmit) {
  const CliRun r = Dtrain({"plan", WriteSpec("bad.json", SpecJson(R"({"tp": 3, "pp": 9})"))});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("is not a valid job spec:\n"));
  EXPECT_THAT(r.err, HasSubstr("  parallel.tp=3 does not divide model.n_head=4\n"));
  EXPECT_THAT(r.err, HasSubstr("  parallel.pp=9 exceeds model.n_layer=8"));
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(Dtrain({"plan", WriteSpec("typo.json", R"({"modle": {}})")}).code, kExitUsage);
  const CliRun missing = Dtrain({"plan", "/nonexistent/job.json"});
  EXPECT_EQ(missing.code, kExitUsage);
  EXPECT_THAT(missing.err, HasSubstr("cannot read /nonexistent/job.json"));
}

TEST(Plan, RejectsAScheduleTheLayoutCannotRun) {
  // 16 / 4 = 4 micro-batches on 3 stages: interleaving needs a multiple of 3.
  const CliRun r =
      Dtrain({"plan", WriteSpec("il3.json", SpecJson(R"({"pp": 3, "schedule":)"
                                                     R"( "interleaved", "virtual_stages": 2})",
                                                     4))});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("is not a valid job spec:\n  parallel.schedule=\"interleaved\": "
                               "interleaved needs micro_batches (4) to be a multiple of stages "
                               "(3)"));
  const CliRun few =
      Dtrain({"plan", WriteSpec("few.json", SpecJson(R"({"pp": 4})")), "--workers=3"});
  EXPECT_EQ(few.code, kExitUsage);
  EXPECT_THAT(few.err, HasSubstr("cannot run: needs 4 workers, 3 idle"));
}

TEST(Plan, RejectsADeadlock) {
  const Action f0{ActionType::kForward, 0, 0}, b0{ActionType::kBackward, 0, 0};
  const JobPlan spec = Validated(SpecJson(R"({"pp": 2})", 16));  // one micro-batch
  // Stage 1 runs its backward before its forward: it waits for itself.
  const absl::StatusOr<Plan> plan = MakePlanWithActions(spec, {}, {{f0, b0}, {b0, f0}});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(plan.status().message(),
              HasSubstr("deadlock: stage 0 waits at BW0 for the input gradient of micro-batch 0 "
                        "from stage 1; stage 1 waits at BW0 for its own F0, which comes later"));
}

TEST(Plan, FlagsBelongToPlan) {
  EXPECT_THAT(Dtrain({"submit", "x.json", "--workers=4"}).err,
              HasSubstr("flag --workers applies to 'plan' only"));
  EXPECT_THAT(Dtrain({"plan"}).err, HasSubstr("'plan' needs a job spec file"));
  EXPECT_THAT(Dtrain({"plan", "x.json", "--hosts=0"}).err, HasSubstr("--hosts must be at least 1"));
  EXPECT_THAT(Dtrain({"help"}).out, HasSubstr("plan JOB.json [--workers=N] [--hosts=H]"));
}

TEST(TimelineRows, LetterMicroBatchDashesAndDotsForIdle) {
  pipeline::SimResult sim;
  sim.makespan = 10;
  sim.stages.resize(2);
  sim.stages[0].timeline = {{{ActionType::kForward, 0, 0}, 0, 2},
                            {{ActionType::kBackward, 0, 0}, 4, 10}};
  sim.stages[1].timeline = {{{ActionType::kForward, 12, 1}, 2, 3},
                            {{ActionType::kBackwardInput, 3, 1}, 3, 4},
                            {{ActionType::kBackwardWeight, 3, 1}, 8, 10}};
  EXPECT_EQ(TimelineRows(sim, 1, 10), (std::vector<std::string>{"F0..B0----", "..Fb....w3"}));
  // Too narrow for "F12.1" or "F12": the letter alone; "b3" without its chunk.
  EXPECT_EQ(TimelineRows(sim, 2, 20)[1], "....F-b3........w3.1");
}

}  // namespace
}  // namespace client
}  // namespace dtrain
