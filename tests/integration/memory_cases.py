"""Integration cases for honest host memory (common/host_memory.h, coordinator/worker_registry.h
MemoryShare): CPU workers on one host share its memory, a worker in a cgroup offers at most its
limit, a spec no worker could ever hold is refused at submit with the numbers, and a rank that
grows past its worker's memory fails with "out of memory budget" instead of being OOM-killed.

Each case_* function is one Bazel test (listed in BUILD) and states what it checks.
"""

import json
import os
import re
import sys
import time

from harness import Cluster, expect

GIB = 1 << 30


def host_memory_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


def memory_of(worker):
    return int(worker.get("device", {}).get("memory_bytes", 0))


def spec_needing(gib, **overrides):
    """A valid one-worker spec whose plan (plan/memory.h) needs about `gib` GiB: the embedding
    of a wide vocabulary (parameters, gradients, AdamW moments, and a checkpoint's copy of the
    parameters and moments in host memory: 28 bytes per parameter)."""
    vocab = int(gib * GIB / 28 / 1024)
    spec = {
        "name": "needs-%gGiB" % gib,
        "model": {"vocab_size": vocab, "context": 32, "n_layer": 1, "n_head": 1, "n_embd": 1024},
        "dataset": "data/demo.txt",
        "steps": 5,
        "batch_size": 1,
        "seq_len": 8,
    }
    spec.update(overrides)
    return spec


def case_memory_host_share(args):
    """Five CPU workers on one host offer no more memory together than the host has (each its
    share, the same host id); a spec needing more than a worker's share is refused at submit
    (exit 6) with the rank, its need and the largest worker, and nothing is queued; with
    --allow_waiting it is queued with a warning saying the same; a spec that fits is placed."""
    with Cluster(args.binaries, "memory_host_share") as c:
        c.write_corpus()
        c.start_coordinator(extra=["--max_job_parameters=100000000000"])
        ids = ["w%d" % i for i in range(5)]
        c.start_idle_workers(ids)
        workers = c.workers_by_id()
        host = host_memory_bytes()
        total = sum(memory_of(w) for w in workers.values())
        expect(total <= host, "5 workers offer %d bytes together, the host has %d: %s"
               % (total, host, workers))
        expect(len({w.get("host_id") for w in workers.values()}) == 1,
               "the workers report different host ids: %s" % workers)
        share = min(memory_of(w) for w in workers.values())
        expect(share >= host // 5 - GIB // 8 or share < host // 5,
               "share %d of a %d host" % (share, host))

        # Above a worker's share (host / 5) but below the host: refused, nothing queued.
        need = min(host * 0.6, share * 2.5) / GIB
        path = c.write_spec("big.json", spec_needing(need))
        rc, out, err = c.cli("submit", path)
        expect(rc != 0 and "no registered worker can ever hold this job" in err
               and "rank 0 (dp0 pp0 tp0) needs" in err and "the largest worker has" in err
               and "--allow_waiting" in err,
               "submit of a %.1f GiB job on %.1f GiB workers: exit %d\n%s" % (need, share / GIB,
                                                                             rc, err))
        rc, out, _ = c.cli("list", "--json")
        expect(not json.loads(out).get("jobs"), "a refused job was queued: %s" % out)

        rc, out, err = c.cli("submit", path, "--allow_waiting", "--json")
        expect(rc == 0 and "warning: no registered worker can hold this job" in err,
               "submit --allow_waiting: exit %d\n%s" % (rc, err))
        big = json.loads(out.splitlines()[-1])["id"]
        c.wait_job(big, lambda j: j.get("state") == "QUEUED" and "needs" in j.get("reason", ""),
                   20, "the big job QUEUED waiting for memory")

        small = c.submit(c.write_spec("small.json", spec_needing(0.05)))
        c.wait_state(small, {"SUCCEEDED"}, 120)
        expect(c.job(big).get("state") == "QUEUED", "the big job left QUEUED")
        c.cli("cancel", big)


CGROUP_ROOT = "/sys/fs/cgroup"


def own_cgroup(controller_line):
    """This process's path in the hierarchy whose /proc/self/cgroup line `controller_line`
    accepts ("0::/a/b" for v2, "4:memory:/a/b" for v1)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            parts = line.rstrip("\n").split(":", 2)
            if len(parts) == 3 and controller_line(parts):
                return parts[2].lstrip("/")
    return None


def make_cgroup(name, limit):
    """A child of this process's own memory cgroup (v2 memory.max, else v1
    memory.limit_in_bytes) limited to `limit`; (None, why) when this machine cannot make one."""
    if os.geteuid() != 0:
        return None, "not root"
    v2 = os.path.join(CGROUP_ROOT, "cgroup.controllers")
    if os.path.exists(v2):
        with open(v2) as f:
            if "memory" not in f.read().split():
                return None, "the memory controller is not enabled at %s" % CGROUP_ROOT
        mount, limit_file = CGROUP_ROOT, "memory.max"
        own = own_cgroup(lambda p: p[0] == "0" and p[1] == "")
    elif os.path.isdir(os.path.join(CGROUP_ROOT, "memory")):
        mount, limit_file = os.path.join(CGROUP_ROOT, "memory"), "memory.limit_in_bytes"
        own = own_cgroup(lambda p: "memory" in p[1].split(","))
    else:
        return None, "no memory cgroup under %s" % CGROUP_ROOT
    if own is None or not os.path.isdir(os.path.join(mount, own)):
        return None, "this process's memory cgroup is not under %s" % mount
    path = os.path.join(mount, own, name)
    try:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, limit_file), "w") as f:
            f.write(str(limit))
    except OSError as e:
        return None, "cannot make %s: %s" % (path, e)
    return path, ""


def case_memory_cgroup(args):
    """A worker in a cgroup (v2, else v1) limited to 3 GiB offers at most 3 GiB (and says it comes
    from its cgroup); a job estimated above 3 GiB but within the host is never placed on it:
    refused at submit, and with --allow_waiting it stays QUEUED naming the need and the worker.
    Skipped (passing, with SKIPPED on stderr) where no memory cgroup can be made (not root)."""
    host = host_memory_bytes()
    if host < 4 * GIB:
        print("SKIPPED: the host has %d bytes, not above the 3 GiB limit" % host)
        return
    group, why = make_cgroup("dtrain-test-%d" % os.getpid(), 3 * GIB)
    if group is None:
        sys.stderr.write("SKIPPED memory_cgroup: %s\n" % why)
        print("SKIPPED: %s" % why)
        return
    try:
        with Cluster(args.binaries, "memory_cgroup") as c:
            c.write_corpus()
            c.start_coordinator()
            # The worker process itself joins the group before it starts (a wrapper that moves
            # its own shell there, then execs the worker), so it reads its limit at start.
            real = c.bin["worker"]
            wrapper = c.write_spec("in-cgroup.sh", "#!/bin/sh\necho $$ > %s/cgroup.procs\n"
                                   "exec %s \"$@\"\n" % (group, os.path.abspath(real)))
            os.chmod(wrapper, 0o755)
            c.bin["worker"] = wrapper
            try:
                p = c.start_worker("w1", extra=[])
            finally:
                c.bin["worker"] = real
            c.wait_workers({"w1": "IDLE"})
            w = c.workers_by_id()["w1"]
            expect(memory_of(w) <= 3 * GIB, "the worker in a 3 GiB cgroup offers %d bytes: %s"
                   % (memory_of(w), w))
            expect("cgroup" in p.log_text(), "the worker does not say its memory comes from its "
                   "cgroup:\n%s" % p.log_text())
            path = c.write_spec("over.json", spec_needing(3.5))
            rc, out, err = c.cli("submit", path)
            expect(rc != 0 and re.search(r"needs 3\.\d GiB; the largest worker has [0-3]\.\d GiB "
                                         r"\(w1\)", err),
                   "a 3.5 GiB job on a 3 GiB worker: exit %d\n%s" % (rc, err))
            rc, out, err = c.cli("submit", path, "--allow_waiting", "--json")
            expect(rc == 0, "submit --allow_waiting: exit %d\n%s" % (rc, err))
            job = json.loads(out.splitlines()[-1])["id"]
            c.wait_job(job, lambda j: "needs" in j.get("reason", ""), 20, "the job waiting")
            time.sleep(2)
            j = c.job(job)
            expect(j.get("state") == "QUEUED" and not j.get("placement", {}).get("ranks"),
                   "the 3.5 GiB job was placed on the 3 GiB worker: %s" % j)
            c.cli("cancel", job)
    finally:
        # Processes left it when they exited; an empty group can be removed.
        for _ in range(50):
            try:
                os.rmdir(group)
                break
            except OSError:
                time.sleep(0.1)


def case_memory_budget(args):
    """A worker whose --memory is below what its rank holds fails the rank with "out of memory
    budget: ..." (the job FAILED saying so, the worker alive and idle again) instead of growing
    until the kernel kills it."""
    with Cluster(args.binaries, "memory_budget") as c:
        c.write_corpus()
        c.start_coordinator()
        # The process alone holds a few MiB that the kernel cannot drop (RssAnon 3.5 MiB idle;
        # its binaries' file pages, which the budget does not count, are 20 MiB), more once a
        # job's threads and buffers are in use; the job's estimate (1.9 MiB with a
        # checkpoint's snapshot, without the process itself: plan/memory.h) fits in 3 MiB, so
        # it is placed and then fails.
        c.start_idle_workers(["w1"], extra=["--memory=3MiB"])
        spec = spec_needing(0, steps=100000,
                            model={"vocab_size": 256, "context": 32, "n_layer": 1, "n_head": 1,
                                   "n_embd": 64})
        job = c.submit(c.write_spec("job.json", spec))
        j = c.wait_state(job, {"FAILED"}, 60)
        expect("out of memory budget: worker w1 holds" in j.get("reason", "")
               and "above its 3.0 MiB" in j.get("reason", ""),
               "the job's reason does not say out of memory budget: %r" % j.get("reason"))
        c.wait_workers({"w1": "IDLE"})
        expect(c.workers["w1"].alive(), "the worker died")
