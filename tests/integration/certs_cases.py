"""Integration cases for certificates that explain themselves: a worker whose certificate the
coordinator refuses at the handshake says why in one line and stops retrying (exit 1).

Each case_* function is one Bazel test (listed in BUILD) and states what it checks.
"""

import re
import subprocess
import time
import urllib.request

from harness import Cluster, expect, tls_flags


def case_worker_expired_certificate(args):
    """A worker started with an expired certificate (`dtrain certs issue --not_after=2020-01-01`)
    exits 1 within 10 s with one line saying the coordinator refused its certificate because it
    "expired on 2020-01-01", instead of retrying "Deadline Exceeded" forever; a worker with a
    certificate of the cluster registers as before, logs its certificate's expiry at start and
    exports it as dtrain_tls_certificate_expiry_timestamp_seconds (a year ahead, as issued), with
    the process_* series and dtrain_build_info beside it."""
    with Cluster(args.binaries, "worker_expired_certificate", tls=True) as c:
        d = c.tls_dir
        argv = [c.bin["cli"], "certs", "issue", d, "oldw", "--role=worker",
                "--not_after=2020-01-01"]
        r = subprocess.run(argv, capture_output=True, timeout=60)
        expect(r.returncode == 0, "%s: %s" % (" ".join(argv), r.stderr.decode()))
        c.write_corpus()
        c.start_coordinator()
        c.start_idle_workers(["good"])
        url = "http://127.0.0.1:%d/metrics" % c.metrics_ports["worker-good"]
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        m = re.search(r'^dtrain_tls_certificate_expiry_timestamp_seconds\{file="certificate"\} '
                      r'(\S+)$', text, re.M)
        expect(m and abs(float(m.group(1)) - (time.time() + 365 * 86400)) < 2 * 86400,
               "no certificate expiry a year ahead in the worker's metrics:\n%s" % text)
        for series in ("process_resident_memory_bytes ", "process_cpu_seconds_total ",
                       "process_open_fds ", "process_threads ", "dtrain_build_info{"):
            expect("\n" + series in text, "the worker exports no %s" % series)
        expect(re.search(r"TLS files: certificate \S+worker.pem CN=worker OU=worker expires ",
                         c.workers["good"].log_text()),
               "the worker does not log its certificate's expiry:\n%s"
               % c.workers["good"].log_text())
        start = time.monotonic()
        old = c.start_worker("old", extra=tls_flags(d, "oldw"))
        rc = old.wait(30)
        took = time.monotonic() - start
        log = old.log_text()
        expect(rc == 1, "the worker with an expired certificate: exit %s after %.1fs, want 1\n%s"
               % (rc, took, log))
        expect(took < 10, "the worker took %.1fs to give up, want < 10s" % took)
        lines = [l for l in log.splitlines() if "expired on 2020-01-01" in l]
        expect(lines and "refused" in lines[-1] and "error:" in lines[-1],
               "the worker does not say its certificate expired:\n%s" % log)
        print("expired worker certificate -> exit 1 after %.1fs: %s" % (took, lines[-1]))
        old.popen.wait()
        c.processes.remove(old)  # its exit 1 is the expected outcome, not a crash
