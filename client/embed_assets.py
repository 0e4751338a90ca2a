"""Writes a C++ file defining client/console_assets.h's FindConsoleAsset over the files given.

  embed_assets.py OUT.cc FILE... : each FILE is served at /<its base name>.

Bytes are written as an array of numbers, so any file (text or binary) embeds as it is.
"""

import os
import sys


def main(argv):
    out, files = argv[1], argv[2:]
    names = [os.path.basename(f) for f in files]
    if len(set(names)) != len(names):
        sys.exit("embed_assets.py: two files with one base name: %s" % names)
    lines = ['#include "client/console_assets.h"', "", "#include <array>", "",
             "namespace dtrain {", "namespace client {", "namespace {", ""]
    for i, path in enumerate(files):
        with open(path, "rb") as f:
            data = f.read()
        lines.append("constexpr unsigned char kAsset%d[] = {" % i)
        for start in range(0, len(data), 24):
            lines.append("    " + ",".join(str(b) for b in data[start:start + 24]) + ",")
        lines.append("    0};")
    lines.append("")
    lines.append("const std::array<ConsoleAsset, %d> kAssets = {{" % len(files))
    for i, (path, name) in enumerate(zip(files, names)):
        size = os.path.getsize(path)
        lines.append('    {"/%s", absl::string_view(reinterpret_cast<const char*>(kAsset%d), %d)},'
                     % (name, i, size))
    lines += ["}};", "", "}  // namespace", "",
              "const ConsoleAsset* FindConsoleAsset(absl::string_view path) {",
              "  for (const ConsoleAsset& asset : kAssets) {",
              "    if (asset.path == path) return &asset;",
              "  }",
              "  return nullptr;",
              "}", "", "}  // namespace client", "}  // namespace dtrain", ""]
    with open(out, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv)
