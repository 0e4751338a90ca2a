#!/usr/bin/env python3
"""The harness's own contract: a process that dies of a crash signal fails the case when the
Cluster closes, even a case that passed otherwise (a recovery can hide a crashed worker: a
dtrain-worker's SIGSEGV once showed only as 'worker w1 lost: no heartbeat'); signals the cases
send themselves (kill -9, SIGTERM) do not.

    python3 tests/integration/harness_test.py
"""

import os
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Cluster, TestFailure  # noqa: E402


def run_case(sig):
    """A case that starts one process, sends it `sig` and otherwise passes."""
    with Cluster({}, "harness_test") as c:
        p = c._spawn("sleeper", ["sleep", "60"])
        os.kill(p.pid, sig)
        p.wait(10)


class CrashSignals(unittest.TestCase):
    def test_segv_fails_a_passing_case_naming_the_process_and_signal(self):
        with self.assertRaises(TestFailure) as failure:
            run_case(signal.SIGSEGV)
        self.assertIn("sleeper died of SIGSEGV", str(failure.exception))

    def test_abort_fails_the_case(self):
        with self.assertRaises(TestFailure) as failure:
            run_case(signal.SIGABRT)
        self.assertIn("SIGABRT", str(failure.exception))

    def test_kill_and_term_sent_by_cases_are_not_crashes(self):
        run_case(signal.SIGKILL)
        run_case(signal.SIGTERM)

    def test_a_failing_case_keeps_its_own_error(self):
        with self.assertRaises(ValueError):
            with Cluster({}, "harness_test") as c:
                p = c._spawn("sleeper", ["sleep", "60"])
                os.kill(p.pid, signal.SIGSEGV)
                p.wait(10)
                raise ValueError("the case's own failure")


class TlsFlags(unittest.TestCase):
    def test_a_plaintext_cluster_gives_every_process_insecure(self):
        with Cluster({}, "harness_test") as c:
            self.assertEqual(c.tls_flags("worker"), ["--insecure"])
            self.assertEqual(os.environ.get("DTRAIN_INSECURE"), "1")

    def test_a_tls_cluster_gives_each_process_its_certificate(self):
        with Cluster({}, "harness_test", tls_dir="/certs") as c:
            self.assertEqual(c.tls_flags("viewer"), ["--tls_ca=/certs/ca.pem",
                                                     "--tls_cert=/certs/viewer.pem",
                                                     "--tls_key=/certs/viewer.key"])
            self.assertNotIn("DTRAIN_INSECURE", os.environ)


if __name__ == "__main__":
    unittest.main()
