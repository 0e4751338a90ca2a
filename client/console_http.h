// The rules of `dtrain console`'s HTTP side (console.h), pure so they can be tested alone: which
// --listen it accepts, which Host headers, how a coordinator error becomes an HTTP status, the
// token, and how watch updates become server-sent events.
//
//   ASSIGN_OR_RETURN(ListenAddress listen, ParseListenAddress("127.0.0.1:8080", false));
//   HostAllowed(listen, "localhost:8080") -> true; HostAllowed(listen, "evil.example:8080") ->
//   false HttpStatusFor(absl::PermissionDeniedError("...")) -> 403
#ifndef DTRAIN_CLIENT_CONSOLE_HTTP_H_
#define DTRAIN_CLIENT_CONSOLE_HTTP_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/coordinator.pb.h"

namespace dtrain {
namespace client {

// A --listen value split: host ("127.0.0.1", "::1", "0.0.0.0") and port.
struct ListenAddress {
  std::string host;
  int port = 0;
  bool loopback = false;  // 127.0.0.0/8, ::1 or localhost
};

// THE rule for --listen: HOST:PORT ([V6]:PORT) with a port in 1..65535; a host that is not
// loopback only with --listen_public. INVALID_ARGUMENT naming the flag and what to pass.
absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view listen, bool listen_public);

// Whether a request's Host header may reach a console listening on `listen`. Loopback: only
// the listen address, localhost, 127.0.0.1 or [::1] with the listen port (a page under another
// name, DNS rebinding, is refused). Not loopback: any (the token guards it). A missing header
// is refused on loopback.
bool HostAllowed(const ListenAddress& listen, const char* host);

// The HTTP status for a coordinator call's status: 200 OK, 400 INVALID_ARGUMENT, 403
// PERMISSION_DENIED / UNAUTHENTICATED, 404 NOT_FOUND, 409 FAILED_PRECONDITION, 429
// RESOURCE_EXHAUSTED, 502 UNAVAILABLE, 504 DEADLINE_EXCEEDED, 500 otherwise.
int HttpStatusFor(const absl::Status& status);

// What the job page asks for a sample (POST /api/jobs/ID/sample): the prompt is the request's
// body, the rest its query (?tokens=&temperature=&top_k=&seed=, each optional: `defaults`,
// `dtrain sample`'s). `query(name)` is a query parameter ("" when absent). INVALID_ARGUMENT
// naming the parameter as typed: tokens, top_k and seed not whole numbers, temperature not a
// number, or any of them outside plan/job_sample.h's bounds (THE bounds, the coordinator's).
absl::StatusOr<SampleParameters> ParseSampleParameters(
    const std::function<std::string(const char* name)>& query, std::string prompt,
    const SampleParameters& defaults);

// "OK", "Forbidden", ... for the statuses the console sends.
const char* ReasonPhrase(int http_status);

// The Content-Type of an embedded file, by its extension: "text/html; charset=utf-8", ...
const char* ContentTypeOf(absl::string_view path);

// Equal, in time that does not depend on where they differ (the token).
bool SameSecret(absl::string_view a, absl::string_view b);

// The --listen_public token: 16 random bytes (OpenSSL) as 32 hex digits.
absl::StatusOr<std::string> RandomToken();

// One update of a watch as `dtrain --json watch` prints it (format.h WatchJsonLine), and
// whether it is a step.
struct WatchLine {
  bool step = false;
  std::string json;
};

// The server-sent events of `lines`: each run of steps as one `event: steps` whose data is a
// JSON array of their lines (a replay of 10,000 steps is a few events, not 10,000), anything
// else as its own `data:` line.
//   {step 1, step 2, state} -> "event: steps\ndata: [{..1},{..2}]\n\ndata: {state}\n\n"
std::string EventStreamText(const std::vector<WatchLine>& lines);

}  // namespace client
}  // namespace dtrain

#endif  // DTRAIN_CLIENT_CONSOLE_HTTP_H_
