#include "client/console.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "civetweb.h"
#include "client/commands.h"
#include "client/console_assets.h"
#include "client/console_http.h"
#include "client/format.h"
#include "client/plan.h"
#include "client/sample.h"
#include "client/trace.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "plan/job_plan.h"
#include "plan/job_sample.h"

namespace dtrain {
namespace client {
namespace {

constexpr char kTokenCookie[] = "dtrain_console_token";
constexpr char kPostHeader[] = "X-Dtrain-Console";
// A comment line on an idle event stream this often, so a browser that has gone is noticed.
constexpr absl::Duration kStreamPing = absl::Seconds(10);

// civetweb's threads have 100 KiB stacks (Debian builds it with USE_STACK_SIZE=102400; see
// common/metrics/http_exporter.cc), too small for a gRPC call: every call to the coordinator
// runs on a thread of ours, with the default stack.
template <typename F>
auto OnOwnThread(F f) -> decltype(f()) {
  decltype(f()) result;
  std::thread thread([&] { result = f(); });
  thread.join();
  return result;
}

int Send(mg_connection* connection, int status, absl::string_view content_type,
         absl::string_view body, absl::string_view extra_headers = "") {
  const std::string head = absl::StrCat(
      "HTTP/1.1 ", status, " ", ReasonPhrase(status), "\r\nContent-Type: ", content_type,
      "\r\nContent-Length: ", body.size(),
      "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
      "Content-Security-Policy: default-src 'self'; style-src 'self' 'unsafe-inline'\r\n"
      "Referrer-Policy: no-referrer\r\nConnection: close\r\n",
      extra_headers, "\r\n");
  mg_write(connection, head.data(), head.size());
  mg_write(connection, body.data(), body.size());
  return status;
}

int SendJson(mg_connection* connection, int status, const std::string& json) {
  return Send(connection, status, "application/json", json);
}

// {"code": "PERMISSION_DENIED", "error": "..."}.
std::string ErrorJson(const absl::Status& status) {
  google::protobuf::Struct body;
  (*body.mutable_fields())["code"].set_string_value(absl::StatusCodeToString(status.code()));
  (*body.mutable_fields())["error"].set_string_value(std::string(status.message()));
  return ToJsonLine(body);
}

// ErrorJson with HttpStatusFor's status.
int SendError(mg_connection* connection, const absl::Status& status) {
  return SendJson(connection, HttpStatusFor(status), ErrorJson(status));
}

template <typename T>
int SendResult(mg_connection* connection, const absl::StatusOr<T>& result) {
  if (!result.ok()) return SendError(connection, result.status());
  return SendJson(connection, 200, ToJsonLine(*result));
}

// The value of `name` in a query string or a Cookie header ("" when absent).
std::string QueryValue(const char* query, const char* name) {
  if (query == nullptr) return "";
  char value[256];
  const int n = mg_get_var(query, std::strlen(query), name, value, sizeof(value));
  return n > 0 ? std::string(value, n) : "";
}

// A step number in a query string: 0 when absent; INVALID_ARGUMENT naming it when it is not a
// number of 0 or more.
absl::StatusOr<int64_t> StepQuery(const char* query, const char* name) {
  const std::string text = QueryValue(query, name);
  int64_t value = 0;
  if (!text.empty() && (!absl::SimpleAtoi(text, &value) || value < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=", text, ": not a step number (0 or more)"));
  }
  return value;
}

std::string CookieValue(const char* cookies, const char* name) {
  if (cookies == nullptr) return "";
  char value[256];
  const int n = mg_get_cookie(cookies, name, value, sizeof(value));
  return n > 0 ? std::string(value, n) : "";
}

// What the page may offer: the coordinator's answer for this certificate (AskPermissions).
struct Permissions {
  bool cancel = false;  // CancelJob
  bool submit = false;  // SubmitJob: resubmit
  bool remove = false;  // DeleteJob
  bool drain = false;   // DrainWorker: drain and undrain from the workers page
  std::string name;     // the certificate's CN: Job.owner of the jobs it submits
};

// The updates of a watch, handed from the watching thread to the HTTP thread. Shared: the
// watcher may outlive the request (it stops at its next update once `closed`).
struct EventQueue {
  absl::Mutex mu;
  std::vector<WatchLine> lines ABSL_GUARDED_BY(mu);
  std::string last ABSL_GUARDED_BY(mu);  // the closing event, once the watch returned
  bool done ABSL_GUARDED_BY(mu) = false;
  bool closed ABSL_GUARDED_BY(mu) = false;  // the browser went away
};

class Console {
 public:
  Console(CoordinatorStub& stub, const Invocation& inv, ListenAddress listen, std::string token,
          std::string identity, Permissions may)
      : stub_(stub),
        inv_(inv),
        listen_(std::move(listen)),
        token_(std::move(token)),
        identity_(std::move(identity)),
        may_(may) {}

  // civetweb's begin_request hook: every request is answered here.
  static int BeginRequest(mg_connection* connection) {
    auto* self = static_cast<Console*>(mg_get_user_data(mg_get_context(connection)));
    return self->Handle(connection);
  }

 private:
  int Handle(mg_connection* connection) {
    const mg_request_info* request = mg_get_request_info(connection);
    const std::string method = request->request_method ? request->request_method : "";
    const std::string path = request->local_uri ? request->local_uri : "/";
    if (!HostAllowed(listen_, mg_get_header(connection, "Host"))) {
      return Send(connection, 403, "text/plain", "dtrain console: unexpected Host header\n");
    }
    if (!token_.empty()) {
      const std::string given = QueryValue(request->query_string, "token");
      if (!given.empty() && SameSecret(given, token_)) {
        // Into a cookie, and out of the address bar (and the history).
        return Send(connection, 302, "text/plain", "",
                    absl::StrCat("Location: ", path, "\r\nSet-Cookie: ", kTokenCookie, "=", token_,
                                 "; Path=/; HttpOnly; SameSite=Strict\r\n"));
      }
      if (!SameSecret(CookieValue(mg_get_header(connection, "Cookie"), kTokenCookie), token_)) {
        return Send(connection, 401, "text/plain",
                    "dtrain console: open the address `dtrain console` printed (with ?token=)\n");
      }
    }
    if (absl::StartsWith(path, "/api/")) return Api(connection, method, path, request);
    if (method != "GET") return Send(connection, 405, "text/plain", "GET only\n");
    const ConsoleAsset* asset = FindConsoleAsset(path == "/" ? "/index.html" : path);
    if (asset == nullptr) return Send(connection, 404, "text/plain", "not found\n");
    return Send(connection, 200, ContentTypeOf(asset->path), asset->body);
  }

  int Api(mg_connection* connection, const std::string& method, const std::string& path,
          const mg_request_info* request) {
    absl::string_view rest = path;
    absl::ConsumePrefix(&rest, "/api/");
    if (method == "POST") {
      // A cross-site form or fetch cannot set this header without a preflight we never answer.
      if (mg_get_header(connection, kPostHeader) == nullptr) {
        return SendError(connection, absl::PermissionDeniedError(
                                         absl::StrCat("a POST needs the header ", kPostHeader)));
      }
      absl::string_view id = rest;
      if (absl::ConsumePrefix(&id, "jobs/") && absl::ConsumeSuffix(&id, "/cancel") && !id.empty()) {
        const std::string job_id(id);
        return SendResult(connection, OnOwnThread([&] {
                            return stub_.CancelJob(job_id, "cancelled from dtrain console");
                          }));
      }
      id = rest;
      if (absl::ConsumePrefix(&id, "jobs/") && absl::ConsumeSuffix(&id, "/delete") && !id.empty()) {
        const std::string job_id(id);
        const bool files = QueryValue(request->query_string, "files") == "1";
        return SendResult(connection, OnOwnThread([&] { return stub_.DeleteJob(job_id, files); }));
      }
      id = rest;
      if (absl::ConsumePrefix(&id, "jobs/") && absl::ConsumeSuffix(&id, "/checkpoint") &&
          !id.empty()) {  // `dtrain checkpoint JOB`, without waiting: the page shows the seal
        const std::string job_id(id);
        return SendResult(connection, OnOwnThread([&] { return stub_.CheckpointJob(job_id); }));
      }
      id = rest;
      if (absl::ConsumePrefix(&id, "jobs/") && absl::ConsumeSuffix(&id, "/priority") &&
          !id.empty()) {  // `dtrain priority JOB N`: ?value=N
        const std::string job_id(id);
        absl::StatusOr<int32_t> priority =
            ParsePriority(QueryValue(request->query_string, "value"));
        if (!priority.ok()) return SendError(connection, priority.status());
        return SendResult(connection,
                          OnOwnThread([&] { return stub_.SetJobPriority(job_id, *priority); }));
      }
      id = rest;
      if (absl::ConsumePrefix(&id, "workers/") && !id.empty()) {
        // `dtrain workers drain ID [--now]` (?now=1), `dtrain workers undrain ID`.
        DrainWorkerRequest drain;
        drain.set_drain(absl::ConsumeSuffix(&id, "/drain"));
        if (!drain.drain() && !absl::ConsumeSuffix(&id, "/undrain")) {
          return SendError(connection, absl::NotFoundError(absl::StrCat("no POST ", path)));
        }
        drain.set_worker_id(std::string(id));
        drain.set_now(QueryValue(request->query_string, "now") == "1");
        return SendResult(connection, OnOwnThread([&] { return stub_.DrainWorker(drain); }));
      }
      id = rest;
      if (absl::ConsumePrefix(&id, "jobs/") && absl::ConsumeSuffix(&id, "/sample") && !id.empty()) {
        return Sample(connection, std::string(id), request);
      }
      id = rest;
      if (absl::ConsumePrefix(&id, "jobs/") && absl::ConsumeSuffix(&id, "/resubmit") &&
          !id.empty()) {
        const std::string job_id(id);
        const bool resume = QueryValue(request->query_string, "resume") == "1";
        return SendResult(connection, OnOwnThread([&] { return Resubmit(job_id, resume); }));
      }
      return SendError(connection, absl::NotFoundError(absl::StrCat("no POST ", path)));
    }
    if (method != "GET") return Send(connection, 405, "text/plain", "GET or POST only\n");
    if (rest == "whoami") {
      google::protobuf::Struct body;
      (*body.mutable_fields())["identity"].set_string_value(identity_);
      (*body.mutable_fields())["may_cancel"].set_bool_value(may_.cancel);
      (*body.mutable_fields())["may_submit"].set_bool_value(may_.submit);
      (*body.mutable_fields())["may_delete"].set_bool_value(may_.remove);
      (*body.mutable_fields())["may_drain"].set_bool_value(may_.drain);
      (*body.mutable_fields())["name"].set_string_value(may_.name);
      (*body.mutable_fields())["coordinator"].set_string_value(stub_.address());
      return SendJson(connection, 200, ToJsonLine(body));
    }
    if (rest == "jobs") {
      return SendResult(connection, OnOwnThread([&] { return stub_.ListJobs(100); }));
    }
    if (rest == "workers") {
      return SendResult(connection, OnOwnThread([&] { return stub_.ListWorkers(); }));
    }
    absl::string_view id = rest;
    if (absl::ConsumePrefix(&id, "jobs/") && !id.empty()) {
      if (absl::ConsumeSuffix(&id, "/watch")) {
        // ?after_step=N: the steps after N only (the page loaded the older ones with /steps).
        absl::StatusOr<int64_t> after = StepQuery(request->query_string, "after_step");
        if (!after.ok()) return SendError(connection, after.status());
        return Watch(connection, std::string(id), *after);
      }
      if (absl::ConsumeSuffix(&id, "/steps")) {
        // GetJobSteps: ?after_step=&until_step=&max_steps= (each optional).
        absl::StatusOr<int64_t> after = StepQuery(request->query_string, "after_step");
        absl::StatusOr<int64_t> until = StepQuery(request->query_string, "until_step");
        absl::StatusOr<int64_t> max = StepQuery(request->query_string, "max_steps");
        for (const absl::StatusOr<int64_t>* v : {&after, &until, &max}) {
          if (!v->ok()) return SendError(connection, v->status());
        }
        GetJobStepsRequest steps;
        steps.set_job_id(std::string(id));
        steps.set_after_step(*after);
        steps.set_until_step(*until);
        // Above the cap: the coordinator's answer names it.
        steps.set_max_steps(
            static_cast<int32_t>(std::min<int64_t>(*max, std::numeric_limits<int32_t>::max())));
        absl::StatusOr<std::string> json = OnOwnThread([&] { return StepsJson(steps); });
        if (!json.ok()) return SendError(connection, json.status());
        return SendJson(connection, 200, *json);
      }
      if (absl::ConsumeSuffix(&id, "/diagnose")) {
        const std::string job_id(id);
        return SendResult(connection, OnOwnThread([&] { return stub_.Diagnose(job_id); }));
      }
      if (absl::ConsumeSuffix(&id, "/trace")) {
        const std::string job_id(id);
        absl::StatusOr<JobTrace> trace =
            OnOwnThread([&] { return stub_.TraceJob(job_id, std::nullopt); });
        if (!trace.ok()) return SendError(connection, trace.status());
        return SendJson(connection, 200, ChromeTraceJson(*trace));
      }
      if (absl::ConsumeSuffix(&id, "/access")) {
        const std::string job_id(id);
        return SendResult(connection, OnOwnThread([&] { return stub_.Access(job_id); }));
      }
      if (absl::ConsumeSuffix(&id, "/checkpoints")) {
        const std::string job_id(id);
        return SendResult(connection, OnOwnThread([&] { return stub_.ListCheckpoints(job_id); }));
      }
      if (absl::ConsumeSuffix(&id, "/logs")) {
        const std::string job_id(id);
        absl::StatusOr<std::string> logs = OnOwnThread([&] { return LogsJson(job_id); });
        if (!logs.ok()) return SendError(connection, logs.status());
        return SendJson(connection, 200, *logs);
      }
      if (absl::ConsumeSuffix(&id, "/plan")) {
        const std::string job_id(id);
        return SendResult(connection, OnOwnThread([&] { return PlanOfJob(job_id); }));
      }
      if (id.find('/') == absl::string_view::npos) {
        const std::string job_id(id);
        return SendResult(connection, OnOwnThread([&] { return stub_.GetJob(job_id); }));
      }
    }
    return SendError(connection, absl::NotFoundError(absl::StrCat("no GET ", path)));
  }

  // `dtrain resubmit JOB [--resume]`: the job's spec (as the coordinator validated it) again.
  absl::StatusOr<SubmitJobResponse> Resubmit(const std::string& job_id, bool resume) {
    absl::StatusOr<Job> job = stub_.GetJob(job_id);
    if (!job.ok()) return job.status();
    SubmitJobRequest request;
    *request.mutable_spec() = job->spec();
    if (resume) request.mutable_spec()->set_resume_from(job_id);
    return stub_.SubmitJob(request);
  }

  // GetJobSteps as {"recorded": N, "steps": [the watch stream's step lines...]}.
  absl::StatusOr<std::string> StepsJson(const GetJobStepsRequest& request) {
    absl::StatusOr<GetJobStepsResponse> answer = stub_.GetJobSteps(request);
    if (!answer.ok()) return answer.status();
    std::vector<std::string> lines;
    lines.reserve(answer->steps_size());
    JobUpdate update;
    update.mutable_job()->set_id(request.job_id());
    for (StepMetrics& m : *answer->mutable_steps()) {
      update.mutable_step()->Swap(&m);
      lines.push_back(WatchJsonLine(update));
    }
    return absl::StrCat("{\"recorded\":", answer->recorded(), ",\"steps\":[",
                        absl::StrJoin(lines, ","), "]}");
  }

  // The job's log without following it: {"entries": [LogEntry...]}.
  absl::StatusOr<std::string> LogsJson(const std::string& job_id) {
    std::vector<std::string> entries;
    const absl::Status status =
        stub_.JobLogs(job_id, std::nullopt, /*follow=*/false,
                      [&](const LogEntry& e) { entries.push_back(ToJsonLine(e)); });
    if (!status.ok()) return status;
    return absl::StrCat("{\"entries\":[", absl::StrJoin(entries, ","), "]}");
  }

  // `dtrain plan` of the job's spec, on exactly dp*pp*tp hypothetical workers: {"text": ...}.
  absl::StatusOr<google::protobuf::Struct> PlanOfJob(const std::string& job_id) {
    absl::StatusOr<Job> job = stub_.GetJob(job_id);
    if (!job.ok()) return job.status();
    absl::StatusOr<JobPlan> job_plan = plan::MakeJobPlan(job->spec());
    if (!job_plan.ok()) return job_plan.status();
    absl::StatusOr<Plan> made = MakePlan(*job_plan, PlanOptions{});
    if (!made.ok()) return made.status();
    google::protobuf::Struct body;
    (*body.mutable_fields())["text"].set_string_value(PlanText(*made, job_id));
    return body;
  }

  // Server-sent events: `data: <dtrain --json watch line>` per update but steps, which come as
  // `event: steps` with an array of such lines; `event: end` or `event: failed` (data: the
  // error) last.
  int Watch(mg_connection* connection, const std::string& job_id, int64_t after_step) {
    auto queue = std::make_shared<EventQueue>();
    std::thread watcher([this, queue, job_id, after_step] {
      WatchCallbacks callbacks;
      callbacks.on_update = [&](const JobUpdate& update) {
        absl::MutexLock lock(&queue->mu);
        queue->lines.push_back({update.has_step(), WatchJsonLine(update)});
      };
      callbacks.keep_watching = [&] {
        absl::MutexLock lock(&queue->mu);
        return !queue->closed;
      };
      const absl::Status status = stub_.WatchJob(job_id, after_step, callbacks);
      absl::MutexLock lock(&queue->mu);
      queue->last = status.ok() ? "event: end\ndata: {}\n\n"
                                : absl::StrCat("event: failed\ndata: ", ErrorJson(status), "\n\n");
      queue->done = true;
    });
    watcher.detach();

    static constexpr char kHead[] =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
        "X-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n";
    bool open = mg_write(connection, kHead, sizeof(kHead) - 1) > 0;
    while (open) {
      std::vector<WatchLine> lines;
      bool done = false;
      std::string last;
      {
        absl::MutexLock lock(&queue->mu);
        auto ready = [&queue]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue->mu) {
          return !queue->lines.empty() || queue->done;
        };
        queue->mu.AwaitWithTimeout(absl::Condition(&ready), kStreamPing);
        lines.swap(queue->lines);
        done = queue->done;
        last = queue->last;
      }
      std::string chunk = EventStreamText(lines) + last;
      if (chunk.empty()) chunk = ": ping\n\n";
      open = mg_write(connection, chunk.data(), chunk.size()) > 0;
      if (done) break;
    }
    absl::MutexLock lock(&queue->mu);
    queue->closed = true;
    return 200;
  }

  // `dtrain sample JOB` from the page: the coordinator's SampleJob (a worker that can read the
  // job's files draws it), with the page's parameters (ParseSampleParameters, the console's
  // flags as defaults). SampleJobResponse as JSON: prompt_tokens, tokens, text, source,
  // worker_id. One at a time: another while one runs is 429.
  int Sample(mg_connection* connection, const std::string& job_id, const mg_request_info* request) {
    // Read up to just past the bound, whatever Content-Length claims: a longer one is refused.
    std::string prompt;
    char buffer[4096];
    int n = 0;
    while (prompt.size() <= plan::kMaxSamplePromptBytes &&
           (n = mg_read(connection, buffer, sizeof(buffer))) > 0) {
      prompt.append(buffer, n);
    }
    absl::StatusOr<SampleParameters> defaults = SampleParametersOf(inv_);
    if (!defaults.ok()) return SendError(connection, defaults.status());
    absl::StatusOr<SampleParameters> asked = ParseSampleParameters(
        [&](const char* name) { return QueryValue(request->query_string, name); },
        std::move(prompt), *defaults);
    if (!asked.ok()) return SendError(connection, asked.status());
    if (!sampling_.TryLock()) {
      return SendError(connection,
                       absl::ResourceExhaustedError(
                           "a sample is being drawn already; ask again when it is done"));
    }
    absl::StatusOr<SampleJobResponse> sample =
        OnOwnThread([&] { return stub_.SampleJob(job_id, *asked, kSampleWait); });
    sampling_.Unlock();
    if (!sample.ok()) return SendError(connection, sample.status());
    return SendJson(connection, 200, ToJsonLine(*sample));
  }

  CoordinatorStub& stub_;
  const Invocation inv_;  // the sample flags: the page's defaults
  const ListenAddress listen_;
  const std::string token_;  // empty: loopback, no token
  const std::string identity_;
  const Permissions may_;
  absl::Mutex sampling_;  // held while a sample is drawn
};

// Who the console acts as: the certificate's subject, or "insecure".
std::string IdentityOf(const Invocation& inv) {
  const TlsFiles tls = TlsFilesOf(inv, std::getenv);
  if (tls.insecure) return "insecure (no certificate)";
  absl::StatusOr<std::string> described = DescribeCertificateFile(tls.cert);
  return described.ok() ? *described : tls.cert;
}

// What the coordinator lets this certificate do (Coordinator.Access: its role table,
// coordinator/roles.h, is the one rule). A role that may cancel, delete or resubmit only its own
// jobs has the method here; the job page asks again for its job (GET /api/jobs/ID/access).
absl::StatusOr<Permissions> AskPermissions(CoordinatorStub& stub) {
  ASSIGN_OR_RETURN(AccessResponse access, OnOwnThread([&] { return stub.Access(); }));
  Permissions may;
  may.name = access.name();
  for (const std::string& method : access.methods()) {
    may.cancel = may.cancel || method == "CancelJob";
    may.submit = may.submit || method == "SubmitJob";
    may.remove = may.remove || method == "DeleteJob";
    may.drain = may.drain || method == "DrainWorker";
  }
  return may;
}

}  // namespace

int RunConsole(const Invocation& inv, CoordinatorStub& stub, Output& output) {
  absl::StatusOr<ListenAddress> listen = ParseListenAddress(inv.listen, inv.listen_public);
  if (!listen.ok()) {
    output.err << "dtrain: " << listen.status().message() << "\n";
    return kExitUsage;
  }
  // The credentials work (and the coordinator answers) before anything listens.
  absl::StatusOr<ListWorkersResponse> check = OnOwnThread([&] { return stub.ListWorkers(); });
  if (!check.ok()) {
    output.err << "dtrain: console: " << check.status().message() << "\n";
    return ExitCodeFor(check.status());
  }
  std::string token;
  if (!listen->loopback) {
    absl::StatusOr<std::string> random = RandomToken();
    if (!random.ok()) {
      output.err << "dtrain: " << random.status().message() << "\n";
      return kExitOtherError;
    }
    token = *random;
  }
  const std::string identity = IdentityOf(inv);
  absl::StatusOr<Permissions> may = AskPermissions(stub);
  if (!may.ok()) {
    output.err << "dtrain: console: cannot ask the coordinator what this certificate may do: "
               << may.status().message() << "\n";
    return ExitCodeFor(may.status());
  }
  auto console = std::make_unique<Console>(stub, inv, *listen, token, identity, *may);

  mg_init_library(0);
  mg_callbacks callbacks{};
  callbacks.begin_request = &Console::BeginRequest;
  static std::string* start_error = new std::string();
  callbacks.log_message = [](const mg_connection*, const char* message) {
    if (start_error->empty()) *start_error = message;
    return 1;
  };
  const std::string host =
      absl::StrContains(listen->host, ':') ? absl::StrCat("[", listen->host, "]") : listen->host;
  const std::string ports = absl::StrCat(host, ":", listen->port);
  const char* options[] = {"listening_ports",    ports.c_str(), "num_threads", "32",
                           "request_timeout_ms", "30000",       nullptr};
  mg_context* context = mg_start(&callbacks, console.get(), options);
  if (context == nullptr) {
    output.err << "dtrain: console: cannot listen on " << ports << ": " << *start_error << "\n";
    return kExitUsage;
  }
  output.out << "dtrain console: http://" << ports << "/" << (token.empty() ? "" : "?token=")
             << token << " (as " << identity << ", coordinator " << stub.address()
             << "); Ctrl-C stops it\n";
  output.out.flush();
  // Serves until a signal ends the process.
  while (true) absl::SleepFor(absl::Hours(1));
}

}  // namespace client
}  // namespace dtrain
