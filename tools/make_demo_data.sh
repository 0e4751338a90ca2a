#!/usr/bin/env bash
# Writes the demo corpus to data/demo.txt (about 150 KB of English: the license texts every
# Debian system ships in /usr/share/common-licenses; nothing is downloaded) and prints its path.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p data
out=data/demo.txt
if [ ! -s "$out" ]; then
  cat /usr/share/common-licenses/{GPL-3,LGPL-2.1,Apache-2.0,MPL-2.0,GFDL-1.3,Artistic,CC0-1.0} >"$out"
fi
echo "$out"
