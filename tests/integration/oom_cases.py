"""A worker killed by the kernel's OOM killer is reported as such when it comes back
(common/run_record.h): a real OOM kill in a memory cgroup the test creates (cgroup v1 or v2,
as root; the case says SKIPPED when the machine does not let it)."""

import os
import signal

from harness import expect
from harness import Cluster
from recovery_cases import FINAL

LIMIT = 400 << 20  # the cgroup's memory limit


def make_memory_cgroup(name):
    """A new memory cgroup below this process's own with a limit of LIMIT bytes, and the file
    holding its OOM-kill count; (None, why) when this machine does not allow one."""
    with open("/proc/self/cgroup") as f:
        lines = [l.strip().split(":", 2) for l in f if l.strip()]
    for number, controllers, path in lines:
        if number == "0" and controllers == "":
            base, limit_file, count_file = "/sys/fs/cgroup", "memory.max", "memory.events"
        elif "memory" in controllers.split(","):
            base = "/sys/fs/cgroup/memory"
            limit_file, count_file = "memory.limit_in_bytes", "memory.oom_control"
        else:
            continue
        group = os.path.join(base + path.rstrip("/"), "%s-%d" % (name, os.getpid()))
        try:
            os.mkdir(group)
            with open(os.path.join(group, limit_file), "w") as f:
                f.write(str(LIMIT))
        except OSError as e:
            return None, "cannot create a memory cgroup with a limit at %s: %s" % (group, e)
        return group, os.path.join(group, count_file)
    return None, "no memory cgroup in /proc/self/cgroup"


def oom_kills(count_file):
    with open(count_file) as f:
        for line in f:
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return 0


def case_worker_oom_killed(args):
    """A worker in a 400 MiB memory cgroup (offering 8 GiB with --memory, so the coordinator
    places a job of about 1 GiB there and the worker's own budget watch does not act first) is
    killed by the kernel's OOM killer during the job's first step; started again in the same
    cgroup, it says in its log and in the job's log (`dtrain logs`) that its previous process
    was killed by the kernel's OOM killer while it ran rank 0 of the job, with the counter's
    file and values. Started again after a plain kill -9 instead, it says "not by the OOM
    killer"."""
    group, count_file = make_memory_cgroup("dtrain-oom")
    if group is None:
        print("SKIPPED worker_oom_killed: %s; the test needs root and a writable memory cgroup"
              % count_file)
        return
    wrapper = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', group]
    try:
        with Cluster(args.binaries, "worker_oom_killed") as c:
            c.write_corpus()
            c.start_coordinator()
            c.start_worker("w1", extra=["--memory=8GiB"], wrapper=wrapper)
            c.wait_workers({"w1": "IDLE"})
            before = oom_kills(count_file)
            spec = {
                "name": "too-big",
                "model": {"vocab_size": 256, "context": 128, "n_layer": 8, "n_head": 8,
                          "n_embd": 512},
                "dataset": "data/demo.txt",
                "steps": 5,
                "batch_size": 16,
                "seq_len": 128,
                "fault_tolerance": {"max_restarts": 0},
            }
            job_id = c.submit(c.write_spec("big.json", spec))
            rc = c.workers["w1"].wait(120)
            expect(rc == -signal.SIGKILL, "the worker should have been OOM-killed (SIGKILL), "
                   "exit status %s" % rc)
            after = oom_kills(count_file)
            expect(after > before, "the cgroup's oom_kill count did not grow: %d -> %d"
                   % (before, after))
            c.start_worker("w1", extra=["--memory=8GiB"], wrapper=wrapper)
            c.wait_workers({"w1": "IDLE"})
            done = c.wait_state(job_id, FINAL, 60)
            want = "killed by the kernel's OOM killer while it ran rank 0 of %s" % job_id
            log = c.workers["w1"].log_text()
            expect(want in log, "the restarted worker's log does not say so:\n%s" % log[-3000:])
            c.wait_until(lambda: want in c.cli("logs", job_id, timeout=30)[1], 30,
                         "the job's log naming the OOM killer")

            # A plain kill -9 during a job is not called an OOM kill.
            small = dict(spec, name="small", model=dict(spec["model"], n_embd=64, n_head=4),
                         steps=100000)
            second = c.submit(c.write_spec("small.json", small))
            c.wait_step(second, 2, 120)
            c.workers["w1"].signal(signal.SIGKILL)
            c.workers["w1"].wait(10)
            c.start_worker("w1", extra=["--memory=8GiB"], wrapper=wrapper)
            c.wait_workers({"w1": "IDLE"})
            rc, out, err = c.cli("logs", second, timeout=30)
            expect("its previous process died while it ran rank 0 of %s, not by the OOM killer"
                   % second in out, "after kill -9:\n%s" % out)
            line = [l for l in c.cli("logs", job_id, timeout=30)[1].splitlines() if want in l]
            print("400 MiB cgroup, job of ~1 GiB: worker OOM-killed (oom_kill %d -> %d), job %s; "
                  "on its return: %s" % (before, after, done["state"], line[0].strip()))
            for p in reversed(c.processes):  # nothing may stay in the cgroup when it goes
                p.stop(timeout=5)
    finally:
        try:
            os.rmdir(group)
        except OSError as e:
            print("could not remove %s: %s" % (group, e))
