// `dtrain console`: a web console on a local address that proxies the coordinator's RPCs with
// the user's own credentials, like `kubectl proxy`. Nothing new listens on the cluster's
// network: the browser talks to this process, this process to the coordinator, over the same
// mutual TLS and with the same certificate (and so the same role) as every other command.
//
//   dtrain console                      # http://127.0.0.1:8080/
//   dtrain console --listen=0.0.0.0:8080 --listen_public
//                                       # http://HOST:8080/?token=<printed at start>
//
// The pages (client/console_assets/, embedded at build time with Debian's dygraphs and d3) read:
//   GET  /api/whoami             {"identity": "CN=... OU=...", "may_cancel": bool,
//                                "may_submit": bool, "may_delete": bool,
//                                "coordinator": "HOST:PORT"}
//   GET  /api/jobs               ListJobs (the newest 100), as `dtrain --json list` prints it
//   GET  /api/jobs/ID            GetJob
//   GET  /api/workers            ListWorkers
//   GET  /api/jobs/ID/diagnose   Diagnose (what every rank is doing; the root of a stall)
//   GET  /api/jobs/ID/trace      TraceJob of the newest complete step, as `dtrain trace` writes it
//                                (client/trace.h: Chrome trace JSON)
//   GET  /api/jobs/ID/plan       {"text": `dtrain plan` of the job's spec on dp*pp*tp workers}
//   GET  /api/jobs/ID/watch      server-sent events: one `dtrain --json watch` line per update
//                                (the job's history first, then live), but steps: a run of them
//                                is one `event: steps` of an array of lines; `event: end` last
//   GET  /api/jobs/ID/checkpoints  ListCheckpoints (the sealed steps kept)
//   GET  /api/jobs/ID/logs       JobLogs, not followed: {"entries": [LogEntry...]}
//   POST /api/jobs/ID/cancel     CancelJob; the coordinator's refusal as 403 with its words
//   POST /api/jobs/ID/delete     DeleteJob (?files=1: its directory too), as `dtrain delete`;
//                                the DeleteJobResponse
//   POST /api/jobs/ID/resubmit   SubmitJob of its spec (?resume=1: resume_from it), as `dtrain
//                                resubmit`; the SubmitJobResponse
//   POST /api/jobs/ID/sample     `dtrain sample JOB`: SampleJob, drawn by a worker of the host
//                                holding the job's newest sealed checkpoint (else its final
//                                weights); the prompt is the body (at most 4 KiB),
//                                ?tokens=&temperature=&top_k=&seed= (console_http.h
//                                ParseSampleParameters); {"prompt_tokens", "tokens", "text",
//                                "source", "worker_id"}; one at a time (429 while one is drawn),
//                                2 minutes at most
// Errors are {"code": "PERMISSION_DENIED", "error": "CancelJob: certificate ..."} with the HTTP
// status HttpStatusFor gives.
//
// Browser-side protections: requests whose Host header is not the listen address are refused
// (DNS rebinding); a POST needs the header X-Dtrain-Console (a cross-site form cannot send it);
// with --listen_public every request needs the token (?token=, then a cookie).
#ifndef DTRAIN_CLIENT_CONSOLE_H_
#define DTRAIN_CLIENT_CONSOLE_H_

#include "client/arguments.h"
#include "client/commands.h"
#include "client/console_http.h"
#include "client/coordinator_stub.h"

namespace dtrain {
namespace client {

// Serves the console until the process is stopped (SIGINT, SIGTERM). Before listening it checks
// the address (ParseListenAddress) and the credentials: one ListWorkers call must succeed. Prints
// the URL to open (with the token when public). Exit codes as commands.h.
int RunConsole(const Invocation& invocation, CoordinatorStub& stub, Output& output);

}  // namespace client
}  // namespace dtrain

#endif  // DTRAIN_CLIENT_CONSOLE_H_
