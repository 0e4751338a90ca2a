"""Integration-test harness: runs the real dtrain binaries on loopback ports.

    with Cluster(binaries) as c:
        c.start_coordinator()
        c.start_worker("w1")
        c.wait_workers({"w1": "IDLE"})
        rc, out, err = c.cli("submit", spec, "--watch")

Every child gets its own log file (under $TEST_UNDECLARED_OUTPUTS_DIR when Bazel runs the test,
so the logs survive in outputs.zip), dies with the driver (PR_SET_PDEATHSIG) and is killed when
the Cluster closes. Every wait is bounded and fails with a message saying what it waited for,
followed by the tail of every log. A daemon that died of a crash signal (SIGSEGV, SIGABRT, ...)
fails the case when the Cluster closes, even when the case passed otherwise: a recovery can hide
a crashed worker. Python standard library only.
"""

import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

_PR_SET_PDEATHSIG = 1

# Signals no case sends: a process that died of one crashed (a bug), whatever the case checks.
CRASH_SIGNALS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT)


def _die_with_parent():
    # Runs in the child between fork and exec: SIGKILL it when the driver dies, however it dies.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def _ephemeral_ports():
    """The kernel's range for outgoing connections' local ports (and for bind to port 0)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


_handed_out = set()  # free_port's answers so far in this process


def free_port():
    """A loopback port that was free a moment ago, picked at random BELOW the kernel's ephemeral
    range: a port the kernel picked for port 0 lies in the range every outgoing connection of
    every process (other tests running beside this one included) takes its local port from, so
    it could be taken before the daemon binds it. Below the range only another test's random
    pick can collide (1 in ~20,000 per port). A port this process handed out before is never
    handed out again: two daemons of one cluster started before either binds (8 workers'
    peer and metrics ports: about a 1 % chance per cluster) would otherwise share one."""
    lo, _ = _ephemeral_ports()
    first = 10000 if lo > 11000 else 1024
    for _ in range(200):
        port = random.randrange(first, lo)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _handed_out.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # a crowded host: the kernel's
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TestFailure(Exception):
    pass


class CannotHappen(TestFailure):
    """Raised by a wait_until predicate when what it waits for can no longer happen (the job
    ended): wait_until passes it on at once instead of retrying until its timeout."""


def tls_flags(tls_dir, name):
    """--tls_ca/--tls_cert/--tls_key of certificate `name` in `tls_dir` (a `dtrain certs init`
    directory: ca.pem, NAME.pem, NAME.key)."""
    return ["--tls_ca=%s" % os.path.join(tls_dir, "ca.pem"),
            "--tls_cert=%s" % os.path.join(tls_dir, name + ".pem"),
            "--tls_key=%s" % os.path.join(tls_dir, name + ".key")]


def add_binary_flags(parser):
    """--coordinator, --worker and --cli for a tool run outside Bazel (tools/fuzz_submit.py,
    tools/bench_worker_memory.py), defaulting to the repository's bazel-bin."""
    bazel_bin = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bazel-bin")
    parser.add_argument("--coordinator", default=os.path.join(bazel_bin, "coordinator",
                                                              "dtrain-coordinator"))
    parser.add_argument("--worker", default=os.path.join(bazel_bin, "worker", "dtrain-worker"))
    parser.add_argument("--cli", default=os.path.join(bazel_bin, "client", "dtrain"))


def binaries_of(args):
    """The Cluster's binaries from add_binary_flags's flags."""
    return {"coordinator": os.path.abspath(args.coordinator),
            "worker": os.path.abspath(args.worker), "cli": os.path.abspath(args.cli)}


def demo_corpus(path):
    """Writes the demo corpus to `path` by running tools/demo_corpus.py, the one recipe that
    tools/make_demo_data.sh runs too (a data dependency of these tests)."""
    recipe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                          "demo_corpus.py")
    run = subprocess.run([sys.executable, recipe, path], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, timeout=60)
    if run.returncode != 0:
        raise TestFailure("%s %s exited %d: %s" % (recipe, path, run.returncode,
                                                   run.stdout.decode(errors="replace")))
    return path


class Process:
    def __init__(self, name, argv, log_path, cwd):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.log.write(("=== %s: %s (cwd %s)\n" % (name, " ".join(argv), cwd)).encode())
        self.log.flush()
        self.popen = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, cwd=cwd,
                                      preexec_fn=_die_with_parent)

    @property
    def pid(self):
        return self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def signal(self, sig):
        if self.alive():
            self.popen.send_signal(sig)

    def wait(self, timeout):
        """Exit status, or None if still running after `timeout` seconds."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout=10):
        """SIGTERM, then SIGKILL after `timeout` seconds; returns the exit status."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            if self.wait(timeout) is None:
                self.popen.kill()
                self.popen.wait()
        self.log.close()
        return self.popen.returncode

    def crash(self):
        """The crash signal's name ("SIGSEGV") when the process died of one, else None."""
        rc = self.popen.poll()
        if rc is not None and rc < 0 and -rc in CRASH_SIGNALS:
            return signal.Signals(-rc).name
        return None

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")


class Cluster:
    """A coordinator, workers and the CLI, all on 127.0.0.1, in one temporary folder.

    Plaintext by default: the daemons and the CLI get --insecure (also a CLI a case runs itself:
    DTRAIN_INSECURE=1 is set in this process's environment). With tls=True (certificates made
    by `dtrain certs init` in tmp/certs) or tls_dir=DIR (certificates already there: ca.pem,
    coordinator, worker, admin, viewer), every process uses mutual TLS instead: the
    coordinator its coordinator certificate, workers the worker one, the CLI the admin one
    (tls_flags says which flags)."""

    def __init__(self, binaries, name, tls=False, tls_dir=None):
        self.bin = binaries  # {"coordinator": path, "worker": path, "cli": path}
        self.tmp = tempfile.mkdtemp(prefix="dtrain-%s-" % name)
        outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
        self.logs = os.path.join(outputs, name) if outputs else os.path.join(self.tmp, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.workdir = os.path.join(self.tmp, "work")  # the workers' cwd: data/demo.txt lives here
        os.makedirs(self.workdir)
        self.port = free_port()
        self.address = "127.0.0.1:%d" % self.port
        self.db = os.path.join(self.tmp, "coordinator.db")
        self.coordinator = None
        self.metrics_ports = {}  # process name ("coordinator", "worker-w1") -> /metrics port
        self.workers = {}
        self.processes = []
        self.lease_s = 3.0
        self.heartbeat_s = 0.5
        self._starts = 0
        self.tls_dir = tls_dir
        if tls and tls_dir is None:
            self.tls_dir = os.path.join(self.tmp, "certs")
            r = subprocess.run([self.bin["cli"], "certs", "init", self.tls_dir],
                               capture_output=True, timeout=60)
            if r.returncode != 0:
                raise TestFailure("dtrain certs init %s: exit %d: %s"
                                  % (self.tls_dir, r.returncode, r.stderr.decode(errors="replace")))
        if self.tls_dir is None:
            os.environ["DTRAIN_INSECURE"] = "1"
        else:
            os.environ.pop("DTRAIN_INSECURE", None)

    def tls_flags(self, name):
        """The flags of a process using certificate `name` of tls_dir (coordinator, worker, admin,
        viewer, or one `dtrain certs issue` added); ["--insecure"] on a plaintext cluster."""
        if self.tls_dir is None:
            return ["--insecure"]
        return tls_flags(self.tls_dir, name)

    # --- lifecycle ---

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        # Stopped first, so that a crash while shutting down counts too.
        for p in reversed(self.processes):
            p.stop(timeout=5)
        crashed = ["%s died of %s (log %s)" % (p.name, p.crash(), p.log_path)
                   for p in self.processes if p.crash()]
        if exc is not None or crashed:
            self.dump_logs()
        for line in crashed:
            sys.stderr.write("CRASHED: %s\n" % line)
        self.close()
        if crashed and exc is None:
            raise TestFailure("crashed: " + "; ".join(crashed))
        return False

    def close(self):
        for p in reversed(self.processes):
            p.stop(timeout=5)
        self.processes = []
        shutil.rmtree(self.tmp, ignore_errors=True)

    def dump_logs(self, lines=60):
        for p in self.processes:
            try:
                text = p.log_text().splitlines()
            except OSError:
                continue
            sys.stderr.write("\n----- last %d lines of %s (%s) -----\n" % (lines, p.name, p.log_path))
            sys.stderr.write("\n".join(text[-lines:]) + "\n")
        sys.stderr.flush()

    def _spawn(self, name, argv, cwd=None):
        self._starts += 1
        log = os.path.join(self.logs, "%02d-%s.log" % (self._starts, name))
        p = Process(name, argv, log, cwd or self.tmp)
        self.processes.append(p)
        return p

    def start_coordinator(self, wait=True, extra=()):
        # Metrics on a port of our own, never the default (which other services may hold).
        self.metrics_ports["coordinator"] = free_port()
        argv = [self.bin["coordinator"], "--listen=%s" % self.address, "--db=%s" % self.db,
                "--lease=%gs" % self.lease_s, "--heartbeat_interval=%dms" % (self.heartbeat_s * 1000),
                "--metrics_listen=127.0.0.1:%d" % self.metrics_ports["coordinator"]]
        argv += self.tls_flags("coordinator") + list(extra)
        self.coordinator = self._spawn("coordinator", argv)
        if wait:
            self.wait_until(lambda: self.cli("workers", timeout=5)[0] == 0, 30,
                            "the coordinator answering at %s" % self.address,
                            process=self.coordinator)
        return self.coordinator

    def start_worker(self, worker_id, extra=(), wrapper=()):
        """`wrapper`: a command line the worker's argv is appended to (it must exec it), e.g. one
        that moves itself into a memory cgroup first."""
        self.metrics_ports["worker-" + worker_id] = free_port()
        # dtrain-worker-testing (the same daemon with the --test_only_* fault flags) only where a
        # case injects a fault: every other worker is the production binary.
        testing = any(str(a).startswith("--test_only_") for a in extra)
        argv = list(wrapper) + [self.bin["worker_testing" if testing else "worker"],
                "--coordinator=%s" % self.address,
                "--metrics_listen=127.0.0.1:%d" % self.metrics_ports["worker-" + worker_id],
                "--worker_id=%s" % worker_id, "--device=cpu", "--threads=1",
                "--host_label=testhost", "--advertise_address=127.0.0.1:%d" % free_port(),
                "--data_root=%s" % os.path.join(self.tmp, "data-" + worker_id),
                # Jobs may use the whole cluster folder: work/ (data, checkpoints) and the rest.
                "--allowed_paths=%s" % self.tmp] + self.tls_flags("worker") + list(extra)
        p = self._spawn("worker-" + worker_id, argv, cwd=self.workdir)
        self.workers[worker_id] = p
        return p

    def start_idle_workers(self, ids, extra=()):
        """start_worker for each id, then waits until every one is IDLE."""
        for w in ids:
            self.start_worker(w, extra)
        self.wait_workers({w: "IDLE" for w in ids})

    def write_corpus(self):
        """data/demo.txt in the workers' cwd, where deploy/examples/tiny.json points."""
        return demo_corpus(os.path.join(self.workdir, "data", "demo.txt"))

    def write_spec(self, name, spec):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(spec if isinstance(spec, str) else json.dumps(spec, indent=2))
        return path

    # --- the CLI ---

    def cli(self, *args, timeout=60, coordinator=None, check=False, cert="admin"):
        """Runs dtrain with certificate `cert` (None: no TLS flags at all); returns (exit code,
        stdout, stderr)."""
        argv = [self.bin["cli"], "--coordinator=%s" % (coordinator or self.address)]
        argv += (self.tls_flags(cert) if cert else []) + list(args)
        try:
            r = subprocess.run(argv, capture_output=True, timeout=timeout, cwd=self.tmp,
                               stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        except subprocess.TimeoutExpired:
            raise TestFailure("`%s` did not finish within %ss" % (" ".join(argv), timeout))
        out, err = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
        if check and r.returncode != 0:
            raise TestFailure("`%s` exited %d\nstdout:\n%s\nstderr:\n%s"
                              % (" ".join(argv), r.returncode, out, err))
        return r.returncode, out, err

    def cli_json(self, *args, timeout=60):
        rc, out, err = self.cli("--json", *args, timeout=timeout)
        if rc != 0:
            raise TestFailure("`dtrain --json %s` exited %d: %s" % (" ".join(args), rc, err))
        try:
            return json.loads(out)
        except ValueError as e:
            raise TestFailure("`dtrain --json %s` printed no JSON (%s):\n%s"
                              % (" ".join(args), e, out))

    def job(self, job_id):
        return self.cli_json("status", job_id)

    def workers_by_id(self):
        return {w["worker_id"]: w for w in self.cli_json("workers").get("workers", [])}

    def submit(self, spec_path):
        job = self.cli_json("submit", spec_path)
        if not job.get("id"):
            raise TestFailure("submit returned no job id: %r" % job)
        return job["id"]

    # --- waiting ---

    def wait_until(self, predicate, timeout, what, process=None, interval=0.2):
        """Polls `predicate` until it returns a truthy value; fails after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            if process is not None and not process.alive():
                raise TestFailure("%s exited (status %s) while waiting for %s"
                                  % (process.name, process.popen.returncode, what))
            try:
                value = predicate()
                if value:
                    return value
            except CannotHappen:
                raise
            except TestFailure as e:
                last_error = e
            time.sleep(interval)
        raise TestFailure("timed out after %ss waiting for %s%s"
                          % (timeout, what, "; last error: %s" % last_error if last_error else ""))

    def wait_workers(self, states, timeout=30):
        """Waits until each worker id in `states` is in its state ("IDLE", "BUSY", "LOST")."""
        seen = {}

        def ok():
            ws = self.workers_by_id()
            seen.clear()
            seen.update({w: "%s%s" % (ws.get(w, {}).get("state", "unregistered"),
                                      " (job %s)" % ws[w]["job_id"]
                                      if ws.get(w, {}).get("job_id") else "")
                         for w, s in states.items() if ws.get(w, {}).get("state") != s})
            return not seen
        try:
            return self.wait_until(ok, timeout, "workers %s" % states)
        except TestFailure as e:
            # Which worker, in which state: the logs printed after a failure are cut to their
            # last lines, and a worker that never got there is where to look.
            raise TestFailure("%s; still not there: %s" % (e, seen)) from None

    def wait_job(self, job_id, predicate, timeout, what):
        def check():
            job = self.job(job_id)
            return job if predicate(job) else None
        return self.wait_until(check, timeout, "%s: %s" % (job_id, what))

    def wait_state(self, job_id, states, timeout):
        if isinstance(states, str):
            states = (states,)
        return self.wait_job(job_id, lambda j: j.get("state") in states, timeout,
                             "state in %s" % (states,))

    def wait_step(self, job_id, step, timeout):
        """The job once it reported `step`; fails at once, with its reason, when the job ended
        before it (instead of waiting out `timeout` for a step that cannot come)."""
        def reached(j):
            if latest_step(j) >= step:
                return True
            if j.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED"):
                raise CannotHappen("%s ended %s before step %d (last step %d): %s"
                                  % (job_id, j["state"], step, latest_step(j), j.get("reason")))
            return False
        return self.wait_job(job_id, reached, timeout, "step >= %d" % step)


def losses(c, job_id):
    """{step: loss} as the coordinator recorded them: `dtrain --json watch` of an ended job replays
    each step once (a step a recovery redid included, with its new loss)."""
    rc, out, err = c.cli("--json", "watch", job_id, timeout=60)
    steps = {}
    for line in out.splitlines():
        if line.strip():
            update = json.loads(line)
            if update["type"] == "step":
                expect(update["step"] not in steps, "%s: step %d replayed twice"
                       % (job_id, update["step"]))
                steps[update["step"]] = float(update["loss"])
    return steps


def job_metric(c, process, name, job_id):
    """The value of `name`{job_id=...} on `process`'s /metrics ("worker-w1", "coordinator"),
    or None when it has no such series."""
    url = "http://127.0.0.1:%d/metrics" % c.metrics_ports[process]
    with urllib.request.urlopen(url, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + "{") and 'job_id="%s"' % job_id in line:
                return float(line.rsplit(" ", 1)[1])
    return None


def small_job_spec(ckpt_dir, steps, interval=0, **overrides):
    """The integration cases' small job: a 4-layer, width-32 byte-level GPT-2 (context 32, batch
    8 of the demo corpus) that trains in a few tens of ms a step on one CPU thread, checkpointing
    into `ckpt_dir` (every `interval` steps when set); `overrides` replace top-level fields
    (`name` among them)."""
    checkpoint = {"dir": ckpt_dir}
    if interval:
        checkpoint["interval_steps"] = interval
    spec = {
        "name": "small",
        "model": {"vocab_size": 256, "context": 32, "n_layer": 4, "n_head": 4, "n_embd": 32},
        "dataset": "data/demo.txt",
        "steps": steps,
        "batch_size": 8,
        "seq_len": 32,
        "optimizer": {"max_lr": 0.003, "warmup_steps": 3, "min_lr_ratio": 0.1},
        "checkpoint": checkpoint,
        "seed": 1337,
    }
    spec.update(overrides)
    return spec


def latest_step(job):
    return int(job.get("latest", {}).get("step", 0) or 0)


def expect(condition, message):
    if not condition:
        raise TestFailure(message)


@contextlib.contextmanager
def hung_listener():
    """A loopback port that accepts TCP connections and never answers (a hung coordinator)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    try:
        yield "127.0.0.1:%d" % s.getsockname()[1]
    finally:
        s.close()
