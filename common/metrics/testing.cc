#include "common/metrics/testing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dtrain::metrics::testing {

std::string HttpResponse::Header(const std::string& name) const {
  for (absl::string_view line : absl::StrSplit(headers, "\r\n")) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    if (absl::EqualsIgnoreCase(line.substr(0, colon), name)) {
      return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return "";
}

absl::StatusOr<HttpResponse> HttpRequest(int port, const std::string& path,
                                         const std::string& method) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect 127.0.0.1:", port, ": ", strerror(e)));
  }
  const std::string request = absl::StrCat(method, " ", path,
                                           " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                           "Connection: close\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      close(fd);
      return absl::UnavailableError("send failed");
    }
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buffer[8192];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) raw.append(buffer, n);
  close(fd);
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) {
    return absl::DataLossError(absl::StrCat("no end of headers in: ", raw));
  }
  HttpResponse response;
  const size_t first = raw.find("\r\n");
  // "HTTP/1.1 200 OK"
  std::vector<std::string> status = absl::StrSplit(raw.substr(0, first), ' ');
  if (status.size() < 2 || !absl::SimpleAtoi(status[1], &response.code)) {
    return absl::DataLossError(absl::StrCat("bad status line: ", raw.substr(0, first)));
  }
  response.headers = raw.substr(first + 2, end - first - 2);
  response.body = raw.substr(end + 4);
  return response;
}

absl::Status PromtoolCheckMetrics(const std::string& text) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    return absl::NotFoundError(
        "promtool not found on PATH: install Debian's prometheus package (tools/setup.sh does)");
  }
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string input =
      absl::StrCat(dir != nullptr ? dir : "/tmp", "/promtool-", getpid(), ".txt");
  FILE* f = std::fopen(input.c_str(), "w");
  if (f == nullptr) return absl::InternalError(absl::StrCat("cannot write ", input));
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  const std::string command = absl::StrCat("promtool check metrics < '", input, "' 2>&1");
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return absl::InternalError(absl::StrCat("cannot run: ", command));
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), p)) > 0) output.append(buffer, n);
  const int status = pclose(p);
  std::remove(input.c_str());
  if (status != 0) {
    return absl::FailedPreconditionError(absl::StrCat("promtool check metrics exited with ",
                                                      WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                                                      ":\n", output, "\non:\n", text));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::metrics::testing
