#!/usr/bin/env bash
# Writes the demo corpus to data/demo.txt and prints its path: about 125 KB of English, the
# license texts every Debian system ships in /usr/share/common-licenses (nothing is downloaded),
# shuffled by paragraph with a fixed seed. The recipe is tools/demo_corpus.py, which the
# integration tests run too; docs/DATA_FORMATS.md ("Demo corpus") describes it. A data/demo.txt
# that is not the recipe's output (e.g. the unshuffled corpus of earlier versions) is replaced,
# with a note on stderr; a current one is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v python3 >/dev/null || { echo "make_demo_data.sh: needs python3 (tools/setup.sh)" >&2; exit 1; }
out=data/demo.txt
python3 tools/demo_corpus.py "$out"
echo "$out"
