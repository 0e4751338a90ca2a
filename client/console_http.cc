#include "client/console_http.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "plan/job_sample.h"

namespace dtrain {
namespace client {
namespace {

bool IsLoopbackHost(absl::string_view host) {
  if (host == "localhost" || host == "::1") return true;
  // 127.0.0.0/8: four numbers, the first 127.
  if (!absl::ConsumePrefix(&host, "127.")) return false;
  int parts = 1;
  for (absl::string_view part : absl::StrSplit(host, '.')) {
    int n = -1;
    if (!absl::SimpleAtoi(part, &n) || n < 0 || n > 255) return false;
    ++parts;
  }
  return parts == 4;
}

}  // namespace

absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view listen, bool listen_public) {
  const size_t colon = listen.rfind(':');
  ListenAddress address;
  const auto bad = [&listen](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad value for --listen: '", listen, "' (", why, "; e.g. 127.0.0.1:8080)"));
  };
  if (colon == absl::string_view::npos) return bad("expected HOST:PORT");
  absl::string_view host = listen.substr(0, colon);
  const absl::string_view port = listen.substr(colon + 1);
  if (absl::ConsumePrefix(&host, "[") && !absl::ConsumeSuffix(&host, "]")) {
    return bad("an IPv6 host is written [HOST]");
  }
  if (host.empty()) return bad("no host: name the interface, e.g. 127.0.0.1");
  if (port.empty() || port.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(port, &address.port) || address.port < 1 || address.port > 65535) {
    return bad("the port must be a number in 1..65535");
  }
  address.host = std::string(host);
  address.loopback = IsLoopbackHost(host);
  if (!address.loopback && !listen_public) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen=", listen,
        " is not a loopback address: anyone who reaches it would act with your certificate; "
        "pass --listen_public as well to serve it there, protected by a token printed at start"));
  }
  return address;
}

int HttpStatusFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kFailedPrecondition:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 502;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

const char* ReasonPhrase(int http_status) {
  switch (http_status) {
    case 200:
      return "OK";
    case 302:
      return "Found";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 429:
      return "Too Many Requests";
    case 502:
      return "Bad Gateway";
    case 504:
      return "Gateway Timeout";
    default:
      return "Internal Server Error";
  }
}

// "text/html; charset=utf-8" for the asset's extension.
absl::StatusOr<SampleParameters> ParseSampleParameters(
    const std::function<std::string(const char* name)>& query, std::string prompt,
    const SampleParameters& defaults) {
  SampleParameters p = defaults;
  if (prompt.size() > plan::kMaxSamplePromptBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt is longer than ", plan::kMaxSamplePromptBytes, " bytes"));
  }
  p.set_prompt(std::move(prompt));
  // Syntax here, the bounds in plan::CheckSampleParameters; each error names what was typed.
  auto whole = [&](const char* name, int64_t low, int64_t high,
                   const std::function<void(int64_t)>& set) -> absl::Status {
    const std::string text = query(name);
    if (text.empty()) return absl::OkStatus();
    int64_t value = 0;
    if (!absl::SimpleAtoi(text, &value) || value < low || value > high) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "=", text, ": a whole number from ", low, " to ", high, " is wanted"));
    }
    set(value);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(whole("tokens", 1, plan::kMaxSampleTokens, [&](int64_t v) { p.set_tokens(v); }));
  RETURN_IF_ERROR(whole("top_k", 0, plan::kMaxSampleTopK, [&](int64_t v) { p.set_top_k(v); }));
  RETURN_IF_ERROR(
      whole("seed", 0, std::numeric_limits<int64_t>::max(), [&](int64_t v) { p.set_seed(v); }));
  const std::string temperature = query("temperature");
  if (!temperature.empty()) {
    double t = 0;
    if (!absl::SimpleAtod(temperature, &t)) {
      return absl::InvalidArgumentError(absl::StrCat("temperature=", temperature,
                                                     ": a number from 0 (greedy) to ",
                                                     plan::kMaxSampleTemperature, " is wanted"));
    }
    p.set_temperature(t);
  }
  RETURN_IF_ERROR(plan::CheckSampleParameters(p));
  return p;
}

const char* ContentTypeOf(absl::string_view path) {
  if (absl::EndsWith(path, ".html")) return "text/html; charset=utf-8";
  if (absl::EndsWith(path, ".js")) return "text/javascript; charset=utf-8";
  if (absl::EndsWith(path, ".css")) return "text/css; charset=utf-8";
  if (absl::EndsWith(path, ".png")) return "image/png";
  return "application/octet-stream";
}

bool HostAllowed(const ListenAddress& listen, const char* host) {
  if (!listen.loopback) return true;
  if (host == nullptr) return false;
  absl::string_view name = host;
  if (!absl::ConsumeSuffix(&name, absl::StrCat(":", listen.port))) return false;
  // An IPv6 host is written in brackets in a Host header.
  const std::string own =
      absl::StrContains(listen.host, ':') ? absl::StrCat("[", listen.host, "]") : listen.host;
  return name == own || name == "localhost" || name == "127.0.0.1" || name == "[::1]";
}

bool SameSecret(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string EventStreamText(const std::vector<WatchLine>& lines) {
  std::string text;
  for (size_t i = 0; i < lines.size();) {
    if (!lines[i].step) {
      absl::StrAppend(&text, "data: ", lines[i].json, "\n\n");
      ++i;
      continue;
    }
    absl::StrAppend(&text, "event: steps\ndata: [", lines[i].json);
    for (++i; i < lines.size() && lines[i].step; ++i) absl::StrAppend(&text, ",", lines[i].json);
    absl::StrAppend(&text, "]\n\n");
  }
  return text;
}

absl::StatusOr<std::string> RandomToken() {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return absl::InternalError("OpenSSL could not make a random token");
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

}  // namespace client
}  // namespace dtrain
