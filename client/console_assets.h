// The web console's files (client/console_assets/ and Debian's dygraphs), embedded in the
// binary at build time by embed_assets.py: the browser never fetches anything from elsewhere.
#ifndef DTRAIN_CLIENT_CONSOLE_ASSETS_H_
#define DTRAIN_CLIENT_CONSOLE_ASSETS_H_

#include "absl/strings/string_view.h"

namespace dtrain {
namespace client {

struct ConsoleAsset {
  absl::string_view path;  // as the browser asks for it: "/job.html", "/dygraph.min.js"
  absl::string_view body;
};

// The asset served at `path`; null for none.
const ConsoleAsset* FindConsoleAsset(absl::string_view path);

}  // namespace client
}  // namespace dtrain

#endif  // DTRAIN_CLIENT_CONSOLE_ASSETS_H_
