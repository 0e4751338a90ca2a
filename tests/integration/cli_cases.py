"""Integration cases for the `dtrain` CLI, through the real binary against real daemons.

Each case_* function is one Bazel test (listed in BUILD) and states what it checks.
"""

import json
import os
import re
import signal
import subprocess
import time

from harness import Cluster, TestFailure, expect, latest_step

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def small_spec(steps, **overrides):
    """A model small enough for a step in well under a second on one CPU thread."""
    spec = {
        "name": "small",
        "model": {"vocab_size": 256, "context": 32, "n_layer": 2, "n_head": 4, "n_embd": 32},
        "dataset": "data/demo.txt",
        "steps": steps,
        "batch_size": 4,
        "seq_len": 32,
        "optimizer": {"max_lr": 0.003, "warmup_steps": 2},
    }
    spec.update(overrides)
    return spec


def one_worker(c):
    c.write_corpus()
    c.start_coordinator()
    c.start_worker("w1")
    c.wait_workers({"w1": "IDLE"})


def run_cli_stdin(c, args, stdin_text, timeout=120):
    argv = [c.bin["cli"], "--coordinator=%s" % c.address] + list(args)
    r = subprocess.run(argv, input=stdin_text.encode(), capture_output=True, timeout=timeout,
                       cwd=c.tmp)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def case_cli_offline(args):
    """Commands that need no coordinator build no channel: `help`, `help watch`, `version`,
    `plan` with $DTRAIN_COORDINATOR empty or --coordinator= print nothing on stderr (no gRPC
    resolver errors) and exit 0; `--version` of every binary names the version and the commit;
    `status --every=2` names the commands --every belongs to (exit 2)."""
    with Cluster(args.binaries, "cli_offline") as c:
        env = dict(os.environ, DTRAIN_COORDINATOR="")
        spec = os.path.abspath(os.path.join(args.examples, "tiny.json"))
        for argv in (["help"], ["--coordinator=", "help"], ["help", "watch"], ["watch", "--help"],
                     ["version"], ["--coordinator=", "plan", spec]):
            r = subprocess.run([c.bin["cli"]] + argv, capture_output=True, timeout=30, env=env,
                               cwd=c.tmp)
            err = r.stderr.decode(errors="replace")
            expect(r.returncode == 0,
                   "dtrain %s: exit %d\n%s" % (" ".join(argv), r.returncode, err))
            expect(err == "", "dtrain %s printed on stderr:\n%s" % (" ".join(argv), err))
        for name in ("cli", "coordinator", "worker"):
            r = subprocess.run([c.bin[name], "--version"], capture_output=True, timeout=30)
            out = r.stdout.decode(errors="replace")
            expect(r.returncode == 0 and re.match(r"dtrain\S* \d+\.\d+\.\d+ \(commit "
                                                  r"([0-9a-f]{40}|unknown)\)\n$", out),
                   "%s --version: exit %d, %r" % (name, r.returncode, out))
        r = subprocess.run([c.bin["cli"], "status", "1", "--every=2"], capture_output=True,
                           timeout=30, env=env)
        err = r.stderr.decode(errors="replace")
        expect(r.returncode == 2 and "flag --every applies to 'watch', 'submit', 'resubmit' only, "
               "not 'status'" in err, "status --every=2: exit %d, %r" % (r.returncode, err))


def case_cli_watch_and_ids(args):
    """`submit -` reads standard input; `--watch --quiet` prints state changes and one summary
    (no step lines, no "QUEUED: queued", the final state once); `watch --every=2` prints every
    2nd step and the last; job ids as job-000001, 1 or a unique name; `status` of several ids
    with start, end and duration; `list --state --limit`; NOT_FOUND names the newest job;
    `cancel` of an ended job exits 0 with a note."""
    with Cluster(args.binaries, "cli_watch_and_ids") as c:
        one_worker(c)
        spec = json.dumps(small_spec(5, name="from-stdin"))
        rc, out, err = run_cli_stdin(c, ["submit", "-", "--watch", "--quiet"], spec)
        expect(rc == 0, "submit - --watch --quiet: exit %d\n%s\n%s" % (rc, out, err))
        lines = out.splitlines()
        job_id = re.match(r"submitted (job-\d+) \(from-stdin\)", lines[0]).group(1)
        expect(not any(" step " in l for l in lines), "--quiet printed step lines:\n%s" % out)
        expect(not any("QUEUED: queued" in l for l in lines), "QUEUED said twice:\n%s" % out)
        finals = [l for l in lines if l.startswith(job_id + " SUCCEEDED")]
        expect(len(finals) == 1 and lines[-1] == finals[0],
               "the final state should be printed once, as the summary:\n%s" % out)

        rc, out, err = c.cli("watch", job_id, "--every=2")
        steps = [int(m.group(1)) for m in re.finditer(r" RUNNING step (\d+)/5 ", out)]
        expect(rc == 0 and steps == [2, 4, 5], "watch --every=2: exit %d, steps %s" % (rc, steps))

        # The same job by id, by number and by name; several at once.
        number = str(int(job_id.split("-")[1]))
        for ref in (job_id, number, "from-stdin"):
            rc, out, err = c.cli("status", ref)
            expect(rc == 0 and ("id:        %s" % job_id) in out, "status %s: %s%s" % (ref, out, err))
        for key in ("started:", "ended:", "duration:"):
            expect(key in out, "status lacks %r:\n%s" % (key, out))
        second = c.submit(c.write_spec("second.json", small_spec(2, name="second")))
        c.wait_state(second, FINAL, 120)
        rc, out, err = c.cli("status", job_id, second)
        expect(rc == 0 and out.count("id:        ") == 2, "status of two ids:\n%s%s" % (out, err))

        rc, out, err = c.cli("list", "--state=SUCCEEDED", "--limit=1")
        rows = [line for line in out.splitlines()[1:] if line.startswith("job-")]
        expect(rc == 0 and len(rows) == 1 and rows[0].startswith(second),
               "list --state=SUCCEEDED --limit=1:\n%s%s" % (out, err))
        # The older SUCCEEDED job is one page on.
        expect(out.rstrip().endswith(
                   "older jobs: dtrain list --page=2 --state=SUCCEEDED --limit=1"),
               "list --limit=1 does not end with the next page's command:\n%s" % out)
        expect("STARTED" in out and "DURATION" in out, "list has no times:\n%s" % out)
        jobs = c.cli_json("list", "--state=RUNNING,QUEUED")["jobs"]
        expect(jobs == [], "no job should be active: %s" % jobs)

        rc, out, err = c.cli("status", "999")
        expect(rc == 4 and "job-000999" in err and ("the newest is %s" % second) in err,
               "status 999: exit %d: %s" % (rc, err))
        rc, out, err = c.cli("cancel", job_id)
        expect(rc == 0 and "already ended" in err and "SUCCEEDED" in out,
               "cancel of an ended job: exit %d\n%s%s" % (rc, out, err))


def case_cli_interrupt(args):
    """Ctrl-C (SIGINT) on `watch` and on `submit --watch` stops the watcher with exit 130 and
    says the job keeps running and how to cancel it; the job does keep running."""
    with Cluster(args.binaries, "cli_interrupt") as c:
        one_worker(c)
        spec = c.write_spec("long.json", small_spec(100000, name="long"))
        for argv in (["submit", spec, "--watch"], ["watch", "long"]):
            p = subprocess.Popen([c.bin["cli"], "--coordinator=" + c.address] + argv,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=c.tmp)
            try:
                job_id = c.wait_until(
                    lambda: next((j["id"] for j in c.cli_json("list", "--state=RUNNING")["jobs"]),
                                 None), 60, "a RUNNING job")
                c.wait_step(job_id, 2, 60)
                time.sleep(0.5)
                p.send_signal(signal.SIGINT)
                out, err = p.communicate(timeout=10)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            err = err.decode(errors="replace")
            expect(p.returncode == 130, "%s: exit %d after SIGINT (want 130)" % (argv, p.returncode))
            want = "%s keeps running; stop it with: dtrain --coordinator=%s cancel %s" % (
                job_id, c.address, job_id)
            expect(want in err, "%s: stderr should say %r:\n%s" % (argv, want, err))
            time.sleep(1)
            expect(c.job(job_id)["state"] == "RUNNING", "the job stopped with its watcher")
        c.cli("cancel", job_id, check=True)


def case_cli_spec_errors(args):
    """Spec file errors say what is wrong and where: an empty file, a directory, standard input
    with nothing, a stream that never ends (/dev/zero: cut off at 16 MiB), and malformed JSON by
    line and column (exit 2 each); `help` lists every command."""
    with Cluster(args.binaries, "cli_spec_errors") as c:
        c.start_coordinator()
        empty = c.write_spec("empty.json", "\n")
        rc, out, err = c.cli("submit", empty)
        expect(rc == 2 and "empty.json: file is empty" in err, "empty: exit %d: %s" % (rc, err))
        rc, out, err = c.cli("submit", c.tmp)
        expect(rc == 2 and "is a directory" in err, "directory: exit %d: %s" % (rc, err))
        rc, out, err = run_cli_stdin(c, ["submit", "-"], "")
        expect(rc == 2 and "standard input: file is empty" in err, "stdin: %d: %s" % (rc, err))
        rc, out, err = c.cli("submit", "/dev/zero", timeout=30)  # was read until memory ran out
        expect(rc == 2 and "/dev/zero is larger than 16 MiB" in err,
               "/dev/zero: exit %d: %s" % (rc, err))
        text = json.dumps(small_spec(3), indent=2).replace('"steps": 3,', '"steps": 3')
        line = next(i for i, l in enumerate(text.splitlines(), 1) if '"steps": 3' in l) + 1
        bad = c.write_spec("malformed.json", text)
        for command in ("submit", "plan"):
            rc, out, err = c.cli(command, bad)
            expect(rc == 2 and ("line %d, column 3: expected ',' or '}'" % line) in err,
                   "%s malformed.json: exit %d: %s" % (command, rc, err))
        rc, out, err = c.cli("help")
        for command in ("resubmit", "logs", "checkpoints", "--forget", "--every", "--state"):
            expect(command in out, "help lacks %s" % command)


def case_cli_logs_checkpoints_resubmit(args):
    """A job checkpointing every 2 steps: `checkpoints` lists its sealed steps with their
    absolute paths, `status` shows the location on its host, `logs` shows the coordinator's
    lines and `--rank=0` only rank 0's; `resubmit --resume --steps=8 --watch` continues from
    step 6 and says so; `workers --forget` removes a LOST worker and refuses a live one."""
    with Cluster(args.binaries, "cli_logs_checkpoints_resubmit") as c:
        one_worker(c)
        ckpt = os.path.join(c.tmp, "ckpt")
        spec = small_spec(6, name="ckpt", checkpoint={"dir": ckpt, "interval_steps": 2})
        rc, out, err = c.cli("submit", c.write_spec("ckpt.json", spec), "--watch", timeout=120)
        expect(rc == 0, "the checkpointing job: exit %d\n%s%s" % (rc, out, err))
        job_id = re.match(r"submitted (job-\d+)", out).group(1)

        rc, out, err = c.cli("checkpoints", job_id)
        expect(rc == 0, "checkpoints: exit %d: %s" % (rc, err))
        for step in (2, 4, 6):
            path = os.path.join(ckpt, job_id, "step_%08d" % step)
            expect(path in out, "checkpoints lacks %s:\n%s" % (path, out))
        rc, out, err = c.cli("status", job_id)
        expect(("checkpoint: %s on testhost" % os.path.join(ckpt, job_id)) in out,
               "status checkpoint line:\n%s" % out)
        expect("sealed:    step 6" in out, "status sealed line:\n%s" % out)

        rc, out, err = c.cli("logs", job_id)
        expect(rc == 0 and " coordinator " in out, "logs: exit %d\n%s%s" % (rc, out, err))
        rc, out, err = c.cli("logs", job_id, "--rank=0")
        expect(rc == 0 and " coordinator " not in out, "logs --rank=0:\n%s%s" % (out, err))

        rc, out, err = c.cli("resubmit", job_id, "--resume", "--steps=8", "--watch", timeout=120)
        expect(rc == 0, "resubmit --resume: exit %d\n%s%s" % (rc, out, err))
        steps = [int(m.group(1)) for m in re.finditer(r" RUNNING step (\d+)/8 ", out)]
        expect(steps == [7, 8], "the resumed job should train steps 7 and 8: %s\n%s" % (steps, out))
        resumed = re.match(r"submitted (job-\d+)", out).group(1)
        rc, out, err = c.cli("status", resumed)
        expect("resumed:   from step 6" in out, "status of the resumed job:\n%s" % out)

        c.start_worker("w2")
        c.wait_workers({"w2": "IDLE"})
        c.workers["w2"].signal(signal.SIGKILL)
        c.wait_workers({"w2": "LOST"}, timeout=c.lease_s + 10)
        rc, out, err = c.cli("workers", "--forget=w1")
        expect(rc == 6, "forgetting a live worker: exit %d (want 6): %s" % (rc, err))
        rc, out, err = c.cli("workers", "--forget=w2")
        expect(rc == 0 and "forgot worker w2" in out, "forget w2: exit %d: %s" % (rc, err))
        expect("w2" not in c.workers_by_id(), "w2 still listed after --forget")
        rc, out, err = c.cli("workers", "--forget=w9")
        expect(rc == 4, "forgetting an unknown worker: exit %d (want 4): %s" % (rc, err))
