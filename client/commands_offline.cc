// The commands that need no coordinator: plan, export, certs, data prepare, and sample of a
// directory (with help and version, RunWithoutCoordinator).
#include "client/command_set.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/certs.h"
#include "client/data_prepare.h"
#include "client/format.h"
#include "client/plan.h"
#include "plan/job_plan.h"
#include "worker/parallel/checkpoint_export.h"
#include "worker/parallel/manifest.h"

namespace dtrain::client::command {

// `data prepare`: a text file tokenized into an llm.c token file.
int DataPrepare(const Invocation& inv, Output& output) {
  if (inv.args[0] != "prepare") {
    output.err << "dtrain: use `dtrain data prepare IN.txt OUT.bin [--tokenizer=gpt2|byte]`\n";
    return kExitUsage;
  }
  absl::StatusOr<PreparedTokens> prepared =
      PrepareTokenFile(inv.args[1], inv.args[2], inv.tokenizer, inv.tokenizer_dir,
                       [&output](const std::string& line) {
                         output.err << "data prepare: " << line << "\n";
                         output.err.flush();
                       });
  if (!prepared.ok()) {
    output.err << "dtrain: data prepare: " << prepared.status().message() << "\n";
    return prepared.status().code() == absl::StatusCode::kInternal ? kExitOtherError : kExitUsage;
  }
  output.out << "wrote " << inv.args[2] << ": " << prepared->tokens << " tokens from "
             << prepared->bytes << " bytes (" << inv.tokenizer << ", vocab_size "
             << prepared->vocab_size << ")\n";
  return kExitOk;
}

// `export`: the shards of a complete checkpoint step (its manifest) into one safetensors file.
int Export(const Invocation& inv, Output& output) {
  // Exit codes (client/README.md): 4 no such checkpoint, 2 not a complete or intact one (or
  // not a checkpoint), 6 the checkpoint is fine but OUT cannot be written.
  const absl::Status readable = parallel::ReadManifest(inv.args[0]).status();
  absl::StatusOr<model::CheckpointStep> exported =
      readable.ok() ? parallel::ExportSafetensors(inv.args[0], inv.args[1]) : readable;
  if (!exported.ok()) {
    const absl::Status& s = exported.status();
    output.err << "dtrain: export failed: " << s.message() << "\n";
    if (!readable.ok()) {
      return s.code() == absl::StatusCode::kNotFound ? kExitNotFound : kExitUsage;
    }
    switch (s.code()) {
      case absl::StatusCode::kInvalidArgument:
      case absl::StatusCode::kFailedPrecondition:
      case absl::StatusCode::kDataLoss:
        return kExitUsage;  // a shard missing or damaged
      default:
        return kExitOtherError;  // writing OUT
    }
  }
  output.out << parallel::ExportSummary(*exported, inv.args[1]) << "\n";
  return kExitOk;
}

// `certs init DIR` / `certs issue DIR NAME --role=ROLE`: what was written and the next step.
int Certs(const Invocation& inv, Output& output) {
  const std::string& action = inv.args[0];
  const std::string& dir = inv.args[1];
  CertOptions options;
  options.hosts = absl::StrSplit(inv.cert_hosts, ',', absl::SkipWhitespace());
  options.days = inv.days;
  if (!inv.not_after.empty()) {
    absl::StatusOr<absl::Time> end = ParseCertDate(inv.not_after);
    if (!end.ok()) {
      output.err << "dtrain: --not_after: " << end.status().message() << "\n";
      return kExitUsage;
    }
    options.not_after = *end;
  }
  absl::StatusOr<std::vector<std::string>> written;
  if (action == "init" && inv.args.size() == 2) {
    written = InitCertificates(dir, options);
  } else if (action == "issue" && inv.args.size() == 3 && !inv.role.empty()) {
    written = IssueCertificate(dir, inv.args[2], inv.role, options);
  } else {
    output.err << "dtrain: use `dtrain certs init DIR` or `dtrain certs issue DIR NAME "
                  "--role=ROLE`\n";
    return kExitUsage;
  }
  if (!written.ok()) {
    output.err << "dtrain: certs " << action << ": " << written.status().message() << "\n";
    return written.status().code() == absl::StatusCode::kInternal ? kExitOtherError : kExitUsage;
  }
  for (const std::string& path : *written) output.out << "wrote " << path << "\n";
  if (action == "init") {
    output.out << "next: start the coordinator with --tls_ca=" << dir
               << "/ca.pem --tls_cert=" << dir << "/coordinator.pem --tls_key=" << dir
               << "/coordinator.key, the workers "
               << "with worker.pem and worker.key, and the CLI with admin.pem and admin.key "
               << "(or DTRAIN_TLS_CA, DTRAIN_TLS_CERT, DTRAIN_TLS_KEY); keep ca.key offline\n";
  } else {
    output.out << "next: give " << inv.args[2] << ".pem, " << inv.args[2] << ".key and ca.pem "
               << "to its holder (--tls_ca, --tls_cert, --tls_key)\n";
  }
  return kExitOk;
}

// `plan`: the job's plan (the coordinator's SubmitJob makes the same, so `submit` rejects what
// this rejects, in the same words) placed on hypothetical workers; no call.
int PlanJob(const Invocation& inv, Output& output) {
  const std::string& path = inv.args[0];
  const std::optional<std::string> contents = ReadSpecFile(path, output);
  if (!contents.has_value()) return kExitUsage;
  absl::StatusOr<JobPlan> job = plan::ParseJobPlanJson(*contents);
  if (!job.ok()) {
    output.err << "dtrain: " << path << " is not a valid job spec:\n";
    absl::string_view message = job.status().message();
    absl::ConsumePrefix(&message, "invalid job spec: ");
    for (const std::string& problem : SplitProblems(std::string(message))) {
      output.err << "  " << problem << "\n";
    }
    return kExitUsage;
  }
  PlanOptions options;
  options.workers = inv.workers;
  options.hosts = inv.hosts;
  absl::StatusOr<Plan> plan = MakePlan(*job, options);
  if (!plan.ok()) {
    // Whatever the code (too few --workers or --hosts for the layout), the input is what must
    // change.
    output.err << "dtrain: " << path << " cannot run: " << plan.status().message() << "\n";
    return kExitUsage;
  }
  output.out << (inv.json ? PlanJson(*plan, path) + "\n" : PlanText(*plan, path));
  return kExitOk;
}

}  // namespace dtrain::client::command
