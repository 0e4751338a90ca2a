#!/usr/bin/env python3
"""The demo corpus: the one recipe behind data/demo.txt (docs/DATA_FORMATS.md, "Demo corpus").

    python3 tools/demo_corpus.py OUT     # exit 0 written or already current, 1 error, 2 usage

tools/make_demo_data.sh (README, Quick start, the compose stack) and the integration tests
(tests/integration/harness.py) both run this file; nothing else builds the corpus.

Recipe, version 2 (version 1 was the same texts concatenated in file order, so whole batches
were the ALL-CAPS warranty sections):
  1. read SOURCES from /usr/share/common-licenses, in that order (about 125 KB of English that
     every Debian system ships; nothing is downloaded);
  2. split each into paragraphs: maximal runs of non-blank lines, a blank line being one of
     only ASCII whitespace (LGPL-2.1's form feeds included); each line keeps its "\n";
  3. shuffle all the paragraphs together: Fisher-Yates driven by SplitMix64 seeded with SEED;
  4. write them joined by one empty line.

Same sources, same bytes, on every machine and every run. OUT is written only when its bytes
differ from the recipe's, atomically (temporary file, rename), so a corpus from an older recipe
(or anything else at OUT) is replaced, and said so on stderr, never kept. A source that differs
from the copy the recipe was pinned on (SOURCE_SHA256, Debian 12's base-files) is named in a
warning: such a machine's corpus differs from everyone else's, so give all worker hosts one file.
Python standard library only.
"""

import hashlib
import os
import sys
import tempfile

LICENSE_DIR = "/usr/share/common-licenses"
RECIPE_VERSION = 2
SEED = 1337

# name -> SHA-256 of Debian 12's copy (base-files 12.4+deb12u11).
SOURCE_SHA256 = {
    "GPL-3": "3972dc9744f6499f0f9b2dbf76696f2ae7ad8af9b23dde66d6af86c9dfb36986",
    "LGPL-2.1": "dc626520dcd53a22f727af3ee42c770e56c97a64fe3adb063799d8ab032fe551",
    "Apache-2.0": "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30",
    "MPL-2.0": "fab3dd6bdab226f1c08630b1dd917e11fcb4ec5e1e020e2c16f83a0a13863e85",
    "GFDL-1.3": "110535522396708cea37c72a802c5e7e81391139f5f7985631c93ef242b206a4",
    "Artistic": "b7fd9b73ea99602016a326e0b62e6646060d18febdd065ceca8bb482208c3d88",
    "CC0-1.0": "a2010f343487d3f7618affe54f789f5487602331c0a8d03f49e9a7c547cf0499",
}
SOURCES = list(SOURCE_SHA256)  # the order matters: it is step 1 of the recipe
# SHA-256 of the corpus made from those sources (125,857 bytes): `sha256sum data/demo.txt`.
CORPUS_SHA256 = "49ab4af7f2c36fd0539ec49ba2e83ada97488ce779d66c60496f2eccbd9a12e4"

_MASK64 = (1 << 64) - 1


def splitmix64(seed):
    """Yields SplitMix64's outputs for `seed` (Steele, Lea, Flood 2014; as in java.util)."""
    state = seed & _MASK64
    while True:
        state = (state + 0x9E3779B97F4A7C15) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        yield z ^ (z >> 31)


def paragraphs(text):
    """Maximal runs of non-blank lines of `text` (bytes), each line with its b"\\n"."""
    result, current = [], []
    for line in text.splitlines():
        if line.strip():
            current.append(line + b"\n")
        elif current:
            result.append(b"".join(current))
            current = []
    if current:
        result.append(b"".join(current))
    return result


def shuffle(items, seed):
    """Fisher-Yates: for i = n-1 down to 1, swap item i with item (next random) mod (i+1)."""
    rng = splitmix64(seed)
    for i in range(len(items) - 1, 0, -1):
        j = next(rng) % (i + 1)
        items[i], items[j] = items[j], items[i]
    return items


def read_sources(license_dir=LICENSE_DIR):
    """[(name, bytes)] of SOURCES; OSError names the file that cannot be read."""
    texts = []
    for name in SOURCES:
        path = os.path.join(license_dir, name)
        try:
            with open(path, "rb") as f:
                texts.append((name, f.read()))
        except OSError as e:
            raise OSError("demo corpus: cannot read %s (%s); it ships with Debian's base-files"
                          % (path, e.strerror or e)) from e
    return texts


def build(texts):
    """The corpus (bytes) for [(name, bytes)] read by read_sources: steps 2 to 4."""
    paras = [p for _, text in texts for p in paragraphs(text)]
    return b"\n".join(shuffle(paras, SEED))


def write(out, license_dir=LICENSE_DIR, log=sys.stderr):
    """Makes `out` hold the corpus; returns `out`. Notes (replaced, differing source) to `log`."""
    texts = read_sources(license_dir)
    for name, text in texts:
        if hashlib.sha256(text).hexdigest() != SOURCE_SHA256[name]:
            log.write("demo corpus: warning: %s differs from Debian 12's copy the recipe was "
                      "pinned on, so this corpus differs from other machines'; give every worker "
                      "host the same %s\n" % (os.path.join(license_dir, name), out))
    corpus = build(texts)
    try:
        with open(out, "rb") as f:
            old = f.read()
    except FileNotFoundError:
        old = None
    if old == corpus:
        return out
    if old is not None:
        what = ("the unshuffled corpus of recipe 1" if old == b"".join(t for _, t in texts)
                else "not this recipe's output")
        log.write("demo corpus: replacing %s (%s) with recipe %d\n" % (out, what, RECIPE_VERSION))
    directory = os.path.dirname(out) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".demo-corpus.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(corpus)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise
    return out


def main(argv):
    if len(argv) != 2 or argv[1].startswith("-"):
        sys.stderr.write("usage: %s OUT (writes the demo corpus to OUT)\n" % argv[0])
        return 2
    try:
        write(argv[1])
    except OSError as e:
        sys.stderr.write("%s\n" % e if str(e).startswith("demo corpus:")
                         else "demo corpus: cannot write %s: %s\n" % (argv[1], e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
