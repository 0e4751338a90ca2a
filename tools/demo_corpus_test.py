#!/usr/bin/env python3
"""Specification of the demo corpus recipe (tools/demo_corpus.py); Python standard library."""

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import demo_corpus  # noqa: E402

RECIPE = os.path.join(HERE, "demo_corpus.py")


def sources_are_pinned():
    return all(hashlib.sha256(text).hexdigest() == demo_corpus.SOURCE_SHA256[name]
               for name, text in demo_corpus.read_sources())


def all_caps(paragraph):
    """A warranty disclaimer: over 80% of its (more than 40) letters upper case."""
    letters = [c for c in paragraph.decode() if c.isalpha()]
    return len(letters) > 40 and sum(c.isupper() for c in letters) > 0.8 * len(letters)


def longest_caps_stretch(paragraphs):
    """Bytes in the longest run of consecutive all-caps paragraphs."""
    best = run = 0
    for p in paragraphs:
        run = run + len(p) if all_caps(p) else 0
        best = max(best, run)
    return best


class DemoCorpusTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="demo-corpus-test-")
        self.texts = demo_corpus.read_sources()
        self.corpus = demo_corpus.build(self.texts)
        self.unshuffled = b"".join(text for _, text in self.texts)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def write(self, out, license_dir=demo_corpus.LICENSE_DIR):
        log = io.StringIO()
        demo_corpus.write(out, license_dir=license_dir, log=log)
        return log.getvalue()

    def test_SplitMix64MatchesTheReferenceSequence(self):
        rng = demo_corpus.splitmix64(0)
        self.assertEqual(next(rng), 0xE220A8397B1DCDAF)
        self.assertEqual(next(rng), 0x6E789E6AA1B965F4)

    def test_ParagraphsSplitOnBlankLinesFormFeedsIncluded(self):
        text = b"a\nb\n\n  \n\x0c\nc\n\n\nd"
        self.assertEqual(demo_corpus.paragraphs(text), [b"a\nb\n", b"c\n", b"d\n"])
        self.assertEqual(demo_corpus.paragraphs(b"\n\n"), [])

    def test_ShuffleIsAPermutationFixedBySeed(self):
        items = list(range(100))
        once = demo_corpus.shuffle(list(items), 1337)
        self.assertEqual(sorted(once), items)
        self.assertNotEqual(once, items)
        self.assertEqual(demo_corpus.shuffle(list(items), 1337), once)
        self.assertNotEqual(demo_corpus.shuffle(list(items), 1338), once)
        self.assertEqual(demo_corpus.shuffle([], 1337), [])
        self.assertEqual(demo_corpus.shuffle([7], 1337), [7])

    def test_SameBytesEveryRunAndThePinnedDigestOnPinnedSources(self):
        self.assertEqual(demo_corpus.build(demo_corpus.read_sources()), self.corpus)
        if not sources_are_pinned():
            self.skipTest("this machine's common-licenses differ from Debian 12's")
        self.assertEqual(hashlib.sha256(self.corpus).hexdigest(), demo_corpus.CORPUS_SHA256)
        self.assertEqual(len(self.corpus), 125857)

    def test_KeepsEveryParagraphOnceInAnotherOrder(self):
        source_paragraphs = [p for _, text in self.texts for p in demo_corpus.paragraphs(text)]
        corpus_paragraphs = demo_corpus.paragraphs(self.corpus)
        self.assertEqual(sorted(corpus_paragraphs), sorted(source_paragraphs))
        self.assertNotEqual(corpus_paragraphs, source_paragraphs)
        self.assertEqual(self.corpus, b"\n".join(corpus_paragraphs))

    def test_WarrantyDisclaimersNoLongerComeTogether(self):
        # In file order GPL-3's and LGPL-2.1's disclaimers are runs of ALL-CAPS paragraphs
        # (1,218 bytes: more than one 8 x 128-token batch of the Quick start).
        source_paragraphs = [p for _, text in self.texts for p in demo_corpus.paragraphs(text)]
        before = longest_caps_stretch(source_paragraphs)
        after = longest_caps_stretch(demo_corpus.paragraphs(self.corpus))
        self.assertLess(after, before)

    def test_WritesAMissingFileAndItsDirectory(self):
        out = os.path.join(self.tmp, "data", "demo.txt")
        self.assertEqual(self.write(out), "")
        with open(out, "rb") as f:
            self.assertEqual(f.read(), self.corpus)
        self.assertEqual(os.listdir(os.path.dirname(out)), ["demo.txt"])  # no temporary left

    def test_LeavesACurrentFileUntouched(self):
        out = os.path.join(self.tmp, "demo.txt")
        self.write(out)
        os.utime(out, (1_000_000_000, 1_000_000_000))
        before = os.stat(out)
        self.assertEqual(self.write(out), "")
        after = os.stat(out)
        self.assertEqual((after.st_ino, after.st_mtime), (before.st_ino, before.st_mtime))

    def test_ReplacesTheUnshuffledCorpusOfRecipe1AndSaysSo(self):
        out = os.path.join(self.tmp, "demo.txt")
        with open(out, "wb") as f:
            f.write(self.unshuffled)
        note = self.write(out)
        self.assertIn("replacing %s (the unshuffled corpus of recipe 1) with recipe 2" % out, note)
        with open(out, "rb") as f:
            self.assertEqual(f.read(), self.corpus)

    def test_ReplacesAnyOtherContentAndSaysSo(self):
        out = os.path.join(self.tmp, "demo.txt")
        with open(out, "wb") as f:
            f.write(self.corpus[:-1])  # a truncated copy
        self.assertIn("(not this recipe's output)", self.write(out))
        with open(out, "rb") as f:
            self.assertEqual(f.read(), self.corpus)

    def test_DifferingSourceIsNamedInAWarning(self):
        licenses = os.path.join(self.tmp, "licenses")
        os.makedirs(licenses)
        for name, text in self.texts:
            with open(os.path.join(licenses, name), "wb") as f:
                f.write(text + b"\nAn extra paragraph.\n" if name == "MPL-2.0" else text)
        note = self.write(os.path.join(self.tmp, "demo.txt"), license_dir=licenses)
        self.assertIn("warning: %s differs" % os.path.join(licenses, "MPL-2.0"), note)
        self.assertNotIn("GPL-3", note)

    def test_MissingSourceFailsNamingTheFileAndWritesNothing(self):
        out = os.path.join(self.tmp, "demo.txt")
        with self.assertRaises(OSError) as e:
            self.write(out, license_dir=os.path.join(self.tmp, "nowhere"))
        self.assertIn(os.path.join(self.tmp, "nowhere", "GPL-3"), str(e.exception))
        self.assertFalse(os.path.exists(out))

    def test_CommandLineExitCodes(self):
        def run(*args):
            return subprocess.run([sys.executable, RECIPE] + list(args), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, timeout=60)
        out = os.path.join(self.tmp, "demo.txt")
        ok = run(out)
        self.assertEqual((ok.returncode, ok.stdout, ok.stderr), (0, b"", b""))
        usage = run()
        self.assertEqual(usage.returncode, 2)
        self.assertIn(b"usage:", usage.stderr)
        self.assertEqual(run("--help").returncode, 2)
        blocked = os.path.join(self.tmp, "file")
        open(blocked, "w").close()
        bad = run(os.path.join(blocked, "demo.txt"))  # a directory that is a file
        self.assertEqual(bad.returncode, 1)
        self.assertIn(b"demo corpus: cannot write " + blocked.encode(), bad.stderr)


if __name__ == "__main__":
    unittest.main()
