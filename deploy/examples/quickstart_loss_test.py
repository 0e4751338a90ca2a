#!/usr/bin/env python3
"""The Quick start's loss curve reads as healthy (issue 11's acceptance); standard library only.

Trains deploy/examples/quickstart-pp2-tp2.json with `dtrain-local --spec` (one process; every
layout trains to one worker's numbers, so these are the losses `tools/quickstart.sh` shows from
its four workers) on the demo corpus made by tools/demo_corpus.py, and checks on --log_json:
  * no step's loss is more than MAX_JUMP above the lowest loss of the (up to) 20 steps before it;
  * the last loss is below MAX_LAST_LOSS.
tiny.json, the one-worker example, trains the same model on the same data with the same settings,
so it is held to the quickstart's training fields instead of being trained a second time.
About 20 s with 2 threads on a 2-core machine (30-45 s with 1).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

MAX_JUMP = 1.0  # nats above the lowest loss of the WINDOW steps before
WINDOW = 20
MAX_LAST_LOSS = 2.6

# The fields that decide the losses; tiny.json must equal the quickstart in each.
TRAINING_FIELDS = ("model", "dataset", "steps", "batch_size", "seq_len", "optimizer", "seed")

ARGS = None  # set by main


def jumps(losses, window=WINDOW):
    """[(1-based step, loss, floor)] for steps 2..n; floor: the lowest of the `window` before."""
    return [(i + 1, losses[i], min(losses[max(0, i - window):i])) for i in range(1, len(losses))]


def largest_jump(losses, window=WINDOW):
    """(jump, 1-based step) of the step whose loss is highest above its floor."""
    return max((loss - floor, step) for step, loss, floor in jumps(losses, window))


def load_spec(name):
    with open(os.path.join(ARGS.examples, name)) as f:
        return json.load(f)


class LargestJump(unittest.TestCase):
    def test_a_spike_is_measured_against_the_lowest_of_the_steps_before(self):
        self.assertEqual(largest_jump([5.0, 3.0, 2.5, 4.0, 2.4]), (1.5, 4))

    def test_the_window_forgets_older_steps(self):
        losses = [2.0, 1.0, 1.5, 1.75, 2.0]
        self.assertEqual(largest_jump(losses), (1.0, 5))
        self.assertEqual(largest_jump(losses, window=2), (0.75, 4))

    def test_a_falling_curve_has_only_negative_jumps(self):
        jump, _ = largest_jump([5.0, 4.0, 3.0])
        self.assertLess(jump, 0)


class ExampleSpecs(unittest.TestCase):
    def test_tiny_trains_with_the_quickstart_settings(self):
        quickstart, tiny = load_spec("quickstart-pp2-tp2.json"), load_spec("tiny.json")
        for field in TRAINING_FIELDS:
            self.assertEqual(tiny.get(field), quickstart.get(field),
                             "tiny.json's %r differs from quickstart-pp2-tp2.json's: the "
                             "quickstart curve this test checks would not be tiny.json's" % field)


class QuickstartLossCurve(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The spec's relative paths (data/demo.txt, runs/quickstart/checkpoints) resolve here.
        cls.workdir = tempfile.mkdtemp(prefix="quickstart_loss_", dir=os.environ.get("TEST_TMPDIR"))
        os.makedirs(os.path.join(cls.workdir, "data"))
        recipe = subprocess.run(
            [sys.executable, ARGS.demo_corpus, os.path.join(cls.workdir, "data", "demo.txt")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        if recipe.returncode != 0:
            raise AssertionError("%s exited %d: %s" % (ARGS.demo_corpus, recipe.returncode,
                                                       recipe.stdout.decode(errors="replace")))
        spec = os.path.join(ARGS.examples, "quickstart-pp2-tp2.json")
        log_json = os.path.join(cls.workdir, "steps.jsonl")
        t0 = time.monotonic()
        run = subprocess.run(
            [ARGS.dtrain_local, "--spec=" + spec, "--threads=%d" % ARGS.threads,
             "--log_json=" + log_json],
            cwd=cls.workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
        cls.seconds = time.monotonic() - t0
        output = run.stdout.decode(errors="replace")
        if run.returncode != 0:
            raise AssertionError("dtrain-local --spec %s exited %d:\n%s"
                                 % (spec, run.returncode, output[-4000:]))
        with open(log_json) as f:
            cls.losses = [json.loads(line)["loss"] for line in f if line.strip()]
        jump, step = largest_jump(cls.losses)
        print("quickstart: %d steps in %.1fs (%d threads), loss %.3f -> %.3f, largest jump "
              "%+.2f at step %d" % (len(cls.losses), cls.seconds, ARGS.threads, cls.losses[0],
                                   cls.losses[-1], jump, step))

    def test_trains_every_step_of_the_spec(self):
        self.assertEqual(len(self.losses), load_spec("quickstart-pp2-tp2.json")["steps"])

    def test_no_step_jumps_more_than_one_nat_above_the_20_before(self):
        spikes = ["step %d: %.3f, %.2f above %.3f" % (step, loss, loss - floor, floor)
                  for step, loss, floor in jumps(self.losses) if loss - floor > MAX_JUMP]
        self.assertEqual(spikes, [], "loss spikes (more than %.1f above the lowest of the %d "
                         "steps before)" % (MAX_JUMP, WINDOW))

    def test_last_loss_is_below_2_6(self):
        self.assertLess(self.losses[-1], MAX_LAST_LOSS)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtrain_local", required=True, help="the dtrain-local binary")
    parser.add_argument("--demo_corpus", required=True, help="tools/demo_corpus.py")
    parser.add_argument("--examples", required=True, help="folder of the example specs")
    parser.add_argument("--threads", type=int, default=2, help="dtrain-local --threads")
    ARGS, rest = parser.parse_known_args()
    # Runfiles paths; dtrain-local runs in a scratch directory.
    for name in ("dtrain_local", "demo_corpus", "examples"):
        setattr(ARGS, name, os.path.abspath(getattr(ARGS, name)))
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
