"""Checkpoints trusted byte for byte (docs/SECURITY.md, "Shared checkpoint directories"): a job
directory altered while its worker is down (garbage in `latest`, an edited manifest, a symlinked
step, what killed writers leave) is resumed from the newest intact sealed step, the job's log
says why in one line each, and nothing outside the directory is read or written.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request

from harness import Cluster, expect, job_metric, losses, small_job_spec
from recovery_cases import (FINAL, STEP_DELAY, compare, one_recovery, run_reference, start,
                            wait_sealed)


def case_checkpoint_untrusted_fallback(args):
    """A one-worker job with a spare, checkpoints at steps 10 and 20, kill -9 after step 23;
    then, before the recovery: `latest` overwritten with non-UTF-8 bytes, step 20's manifest
    edited (adam_step 20 -> 1, its own checksum left as it was), step_00000030 made a symlink to
    a directory outside the checkpoint root, an orphan temporary file in step 10 and an unsealed
    step 25. The recovery resumes from step 10 (found by scanning; the symlink is no candidate),
    says so in the job's log
    (latest unusable, step 20 damaged naming manifest.json, the orphans removed), the job
    SUCCEEDS with every loss equal to the uninterrupted run's, step 30 is written as a real
    directory and the outside directory is untouched."""
    with Cluster(args.binaries, "checkpoint_untrusted_fallback") as c:
        ids = ["w1", "w2"]
        c.write_corpus()
        c.start_coordinator()
        for w in ids:
            c.start_worker(w, extra=[STEP_DELAY])
        c.wait_workers({w: "IDLE" for w in ids})
        ckpt = os.path.join(c.tmp, "ckpt")
        spec = small_job_spec(ckpt, 30, 10, name="trust")
        want = run_reference(c, spec, "reference")
        c.wait_workers({w: "IDLE" for w in ids})

        job_id = c.submit(c.write_spec("altered.json", dict(spec, name="altered")))
        wait_sealed(c, job_id, 20)
        job = c.wait_step(job_id, 23, 60)
        victim = job["placement"]["ranks"][0]["worker_id"]
        c.workers[victim].signal(signal.SIGKILL)

        job_dir = os.path.join(ckpt, job_id)
        with open(os.path.join(job_dir, "latest"), "wb") as f:
            f.write(b"\xff\xfestep_\x00\x80garbage\n")
        manifest = os.path.join(job_dir, "step_00000020", "manifest.json")
        with open(manifest) as f:
            text = f.read()
        expect('"adam_step": "20"' in text, "no adam_step 20 in %s:\n%s" % (manifest, text))
        with open(manifest, "w") as f:
            f.write(text.replace('"adam_step": "20"', '"adam_step": "1"'))
        outside = os.path.join(c.tmp, "outside")
        shutil.copytree(os.path.join(job_dir, "step_00000010"), outside)
        before = sorted(os.listdir(outside))
        os.symlink(outside, os.path.join(job_dir, "step_00000030"))
        with open(os.path.join(job_dir, "step_00000010",
                               "model-pp0-tp0-c0.safetensors.tmp.99999"), "wb") as f:
            f.write(b"half a file")
        os.mkdir(os.path.join(job_dir, "step_00000025"))
        with open(os.path.join(job_dir, "step_00000025", "rank-00000.entries.json.tmp.99999"),
                  "wb") as f:
            f.write(b"{")

        done = c.wait_state(job_id, FINAL, 120)
        expect(done["state"] == "SUCCEEDED", "after kill -9 and the alterations: %s: %s"
               % (done["state"], done.get("reason")))
        r = one_recovery(done)
        expect(int(r.get("resumed_from_step", 0)) == 10,
               "want the recovery to fall back to step 10: %s" % r)
        rc, out, err = c.cli("logs", job_id, timeout=30)
        resumed = [l for l in out.splitlines() if "resuming from step_00000010" in l]
        expect(resumed, "the job's log should say why it resumed from step 10:\n%s" % out)
        line = resumed[0]
        # The symlinked step 30 is no candidate at all: never opened, never named.
        for words in ("latest holds \"\\xff\\xfestep_", "not the name of a step directory",
                      "step_00000020 is damaged (manifest.json: its bytes have xxh3_64"):
            expect(words in line, "the resume line should say %r:\n%s" % (words, line))
        removed = [l for l in out.splitlines() if "removed 1 unsealed step (step_00000025)" in l]
        expect(removed and "temporary file" in removed[0],
               "the job's log should say the orphans were removed:\n%s" % out)
        compare(losses(c, job_id), want, 0.0, "resumed past an altered checkpoint directory")
        step30 = os.path.join(job_dir, "step_00000030")
        expect(not os.path.islink(step30) and os.path.isfile(os.path.join(step30,
                                                                          "manifest.json")),
               "step 30 should be written as a real directory in place of the symlink")
        expect(sorted(os.listdir(outside)) == before,
               "the directory outside the root was written: %s" % sorted(os.listdir(outside)))
        expect(not os.path.exists(os.path.join(job_dir, "step_00000025")) and
               not any(".tmp." in n for n in os.listdir(os.path.join(job_dir, "step_00000010"))),
               "the orphans should be gone")
        print("kill -9 %s at step %s, latest garbage, step 20's manifest edited, step 30 a "
              "symlink: resumed from step 10; log: %s; %s; losses equal"
              % (victim, r["last_step"], line.strip(), removed[0].strip()))


def case_checkpoint_retention(args):
    """checkpoint.keep_last 2 and keep_every 5 with a checkpoint every step of a 12-step job:
    the job SUCCEEDS and its directory holds exactly the sealed steps 5 and 10 (milestones) and
    11 and 12 (the newest two), `latest` naming 12, and `status` shows the directory's size
    (CheckpointStatus.dir_bytes: at least those steps, at most the whole directory) and
    `dtrain checkpoints` lists exactly those steps (the coordinator forgets removed ones); a spec
    with keep_last -1 is refused at submit naming the field."""
    with Cluster(args.binaries, "checkpoint_retention") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_worker("w1")
        c.wait_workers({"w1": "IDLE"})
        ckpt = os.path.join(c.tmp, "ckpt")
        spec = small_job_spec(ckpt, 12, 1, name="retention")
        spec["checkpoint"].update(keep_last=2, keep_every=5)
        job_id = c.submit(c.write_spec("retention.json", spec))
        done = c.wait_state(job_id, FINAL, 120)
        expect(done["state"] == "SUCCEEDED", "%s: %s" % (done["state"], done.get("reason")))
        job_dir = os.path.join(ckpt, job_id)
        steps = sorted(n for n in os.listdir(job_dir) if n.startswith("step_"))
        want = ["step_%08d" % s for s in (5, 10, 11, 12)]
        expect(steps == want, "want exactly %s in %s, found %s" % (want, job_dir, steps))
        for name in steps:
            expect(os.path.isfile(os.path.join(job_dir, name, "manifest.json")),
                   "%s is not sealed" % name)
        with open(os.path.join(job_dir, "latest")) as f:
            latest = f.read().strip()
        expect(latest == "step_00000012", "latest names %r" % latest)
        # The job's directory size as rank 0 counted it after its last seal and retention: at
        # least the sealed steps left, at most everything there now.
        def du(path):
            return sum(os.path.getsize(os.path.join(d, f))
                       for d, _, files in os.walk(path) for f in files)
        reported = int(done["checkpoint"].get("dir_bytes", 0))
        sealed = sum(du(os.path.join(job_dir, n)) for n in steps)
        expect(sealed <= reported <= du(job_dir), "dir_bytes %d: the sealed steps hold %d, the "
               "directory %d" % (reported, sealed, du(job_dir)))
        rc, out, err = c.cli("status", job_id, timeout=30)
        expect(" MiB on disk" in out, "`dtrain status` does not show the disk usage:\n%s" % out)
        # The coordinator forgot the steps retention removed: `checkpoints` lists what is there.
        rc, out, err = c.cli("checkpoints", job_id, timeout=30)
        listed = [int(line.split()[0]) for line in out.splitlines()
                  if line.split() and line.split()[0].isdigit()]
        expect(listed == [5, 10, 11, 12], "`dtrain checkpoints` lists steps %s, the directory "
               "holds %s:\n%s" % (listed, steps, out))

        bad = dict(spec, name="bad-retention")
        bad["checkpoint"] = dict(spec["checkpoint"], keep_last=-1)
        rc, out, err = c.cli("submit", c.write_spec("bad.json", bad), timeout=30)
        expect(rc == 2 and "checkpoint.keep_last=-1 must be >= 1" in err,
               "keep_last -1 should be refused at submit (exit 2): exit %d\n%s%s" % (rc, out, err))
        print("keep_last 2, keep_every 5, 12 steps checkpointed every step: %s remain; "
              "dir_bytes %d (sealed steps %d); keep_last -1 refused: %s"
              % (", ".join(steps), reported, sealed, err.strip().splitlines()[-1]))


@contextlib.contextmanager
def small_tmpfs(c, size, case):
    """A tmpfs of `size` ("2m") mounted at <cluster>/small for the body, or None (the case prints
    SKIPPED) when mounting is not permitted. Every process of `c` is stopped before it goes."""
    small = os.path.join(c.tmp, "small")
    os.mkdir(small)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", small],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print("SKIPPED %s: cannot mount a tmpfs here (%s); the test needs root and CAP_SYS_ADMIN"
              % (case, r.stderr.strip() or r.returncode))
        yield None
        return
    try:
        yield small
    finally:
        for p in reversed(c.processes):  # nothing may hold the tmpfs when it goes
            p.stop(timeout=5)
        subprocess.run(["umount", "-l", small], capture_output=True)


def case_checkpoint_disk_full(args):
    """A one-worker job checkpointing every step into a 2 MiB tmpfs (mounted by the test; skipped
    with a message when mounting is not permitted) with keep_last 2: each step takes about
    0.7 MiB, so from the third on a checkpoint does not fit and is skipped with an event in the
    job's log and counted in dtrain_worker_checkpoints_skipped_total (the CheckpointSkipped
    alert's series); training goes on, the job SUCCEEDS, and no partial step remains (only
    sealed step directories)."""
    with Cluster(args.binaries, "checkpoint_disk_full") as c, \
            small_tmpfs(c, "2m", "checkpoint_disk_full") as small:
        if small is not None:
            c.write_corpus()
            c.start_coordinator()
            c.start_worker("w1")
            c.wait_workers({"w1": "IDLE"})
            spec = small_job_spec(small, 8, 1, name="full")
            spec["checkpoint"]["keep_last"] = 2
            job_id = c.submit(c.write_spec("full.json", spec))
            done = c.wait_state(job_id, FINAL, 120)
            expect(done["state"] == "SUCCEEDED", "a full disk should not fail the job: %s: %s"
                   % (done["state"], done.get("reason")))
            rc, out, err = c.cli("logs", job_id, timeout=30)
            skips = [l for l in out.splitlines() if "skipped:" in l and "training goes on" in l]
            expect(skips, "the job's log should say a checkpoint was skipped:\n%s" % out)
            # The coordinator knows it as a fact too (what `dtrain checkpoint` ends on).
            skipped = done.get("checkpoint", {})
            expect(int(skipped.get("last_skipped_step", 0)) > 0 and
                   skipped.get("last_skip_reason"),
                   "the job's checkpoint status names no skipped step: %s" % skipped)
            counted = job_metric(c, "worker-w1", "dtrain_worker_checkpoints_skipped_total", job_id)
            expect(counted == len(skips), "dtrain_worker_checkpoints_skipped_total is %s, the "
                   "log has %d skips" % (counted, len(skips)))
            job_dir = os.path.join(small, job_id)
            steps = sorted(n for n in os.listdir(job_dir) if n.startswith("step_"))
            expect(steps, "no sealed step at all in %s" % job_dir)
            for name in steps:
                files = os.listdir(os.path.join(job_dir, name))
                expect("manifest.json" in files and not any(".tmp." in f for f in files),
                       "%s is a partial step: %s" % (name, files))
            print("2 MiB tmpfs, a checkpoint every step of 8: SUCCEEDED, %d skipped (%s), "
                  "left %s" % (len(skips), skips[0].strip(), ", ".join(steps)))


def case_checkpoint_last_step_waits(args):
    """A pp=2 job on two workers whose only checkpoint is its last step's (6 steps), into a
    3 MiB tmpfs that a ballast file leaves 200 KiB of: the last step does not fit, and instead of
    failing at its end (its weights are exported from that step) the job stays RUNNING, every
    rank keeping its state, with a line in its log (final_checkpoint.h), its status naming the
    wait and `dtrain diagnose` showing the ranks waiting for disk space. Once the test deletes
    the ballast, the next try seals the step and the job SUCCEEDS with its weights exported.
    Then a pp=2 job whose last step fits but whose exported weights do not: rank 0 waits alone
    (w2 IDLE meanwhile), its status naming the weights file, and SUCCEEDS once space is freed;
    and a one-worker job whose weights' file does not fit waits the same way."""
    with Cluster(args.binaries, "checkpoint_last_step_waits") as c, \
            small_tmpfs(c, "3m", "checkpoint_last_step_waits") as small:
        if small is not None:
            ballast = os.path.join(small, "ballast")
            fs = os.statvfs(small)
            with open(ballast, "wb") as f:
                f.write(b"\0" * (fs.f_bavail * fs.f_frsize - (200 << 10)))
            start(c, ["w1", "w2"])
            spec = small_job_spec(small, 6, name="last-waits", parallel={"pp": 2})
            job_id = c.submit(c.write_spec("last.json", spec))

            def waiting():
                out = c.cli("logs", job_id, timeout=30)[1]
                return [l for l in out.splitlines() if "the last, does not fit" in l]
            lines = c.wait_until(waiting, 120, "the last step's wait for space in the job's log")
            expect("free space in %s" % os.path.join(small, job_id) in lines[0],
                   "the line should say where to free space:\n%s" % lines[0])
            # Its status names the wait (rank 0's CheckpointWait report), not a stall.
            job = c.wait_until(lambda: (lambda j: j if "waiting for disk space" in
                                        j.get("reason", "") else None)(c.job(job_id)),
                               30, "the job's reason naming the wait for disk space")
            expect(job["state"] == "RUNNING", "the job should wait for space at its end: %s: %s"
                   % (job["state"], job.get("reason")))
            expect("the checkpoint of step 6, the last, does not fit in %s"
                   % os.path.join(small, job_id) in job["reason"],
                   "the reason should name the step and the directory: %s" % job["reason"])
            # `diagnose` says what the ranks do meanwhile (between tries: their flight records).
            c.wait_until(lambda: "in checkpoint waiting for disk space" in
                         c.cli("diagnose", job_id, timeout=30)[1], 30,
                         "`dtrain diagnose` naming the wait for disk space")
            os.remove(ballast)  # an operator frees space
            done = c.wait_state(job_id, FINAL, 120)
            expect(done["state"] == "SUCCEEDED", "after space was freed: %s: %s"
                   % (done["state"], done.get("reason")))
            job_dir = os.path.join(small, job_id)
            expect(os.path.isfile(os.path.join(job_dir, "step_00000006", "manifest.json")),
                   "the last step is not sealed: %s" % os.listdir(job_dir))
            expect(os.path.isfile(os.path.join(job_dir, "model.safetensors")),
                   "no exported weights in %s" % job_dir)
            out = c.cli("logs", job_id, timeout=30)[1]
            sealed = [l for l in out.splitlines() if "the last, was written after" in l]
            expect(sealed, "the log should say when the last step sealed:\n%s" % out)
            print("pp=2, the last step into a full tmpfs: RUNNING (%s) and waiting (%s); "
                  "ballast removed: %s; SUCCEEDED" % (job["reason"], lines[0].strip(),
                                                      sealed[0].strip()))

            # The last step fits but its export does not: rank 0 waits alone (its peer has
            # left the run and its worker is free), the status naming the weights file.
            def allocated(path):
                return os.stat(path).st_blocks * 512
            weights = allocated(os.path.join(job_dir, "model.safetensors"))
            step_bytes = sum(allocated(os.path.join(d, f)) for d, _, files in os.walk(job_dir)
                             for f in files if f != "model.safetensors")
            with open(ballast, "wb") as f:
                f.write(b"\0" * (os.statvfs(small).f_bavail * fs.f_frsize -
                                 (step_bytes + weights // 2)))
            export_id = c.submit(c.write_spec("export.json", small_job_spec(
                small, 6, name="export-waits", parallel={"pp": 2})))
            job = c.wait_until(lambda: (lambda j: j if "waiting for disk space" in
                                        j.get("reason", "") else None)(c.job(export_id)),
                               120, "the export's wait named in the job's reason")
            expect(job["state"] == "RUNNING" and "the weights file of step 6 does not fit in %s"
                   % os.path.join(small, export_id) in job["reason"],
                   "the export should wait for space: %s: %s" % (job["state"], job["reason"]))
            expect(os.path.isfile(os.path.join(small, export_id, "step_00000006",
                                               "manifest.json")),
                   "the last step should be sealed before the export waits")
            c.wait_workers({"w2": "IDLE"}, 30)
            os.remove(ballast)
            done = c.wait_state(export_id, FINAL, 120)
            expect(done["state"] == "SUCCEEDED" and os.path.isfile(
                os.path.join(small, export_id, "model.safetensors")),
                "the export, after space was freed: %s: %s" % (done["state"], done.get("reason")))
            print("pp=2, the export into a full tmpfs: %s; w2 IDLE meanwhile; SUCCEEDED"
                  % job["reason"])

            # One worker: its weights are written from memory; when even they do not fit, the
            # same wait (LocalTrainer::SaveWeights).
            with open(ballast, "wb") as f:
                f.write(b"\0" * (os.statvfs(small).f_bavail * fs.f_frsize - (100 << 10)))
            one = c.submit(c.write_spec("one.json", small_job_spec(small, 6, name="one-waits")))
            lines = c.wait_until(
                lambda: [l for l in c.cli("logs", one, timeout=30)[1].splitlines()
                         if "the weights file of step 6" in l and "does not fit" in l],
                120, "the one-worker job's wait for space in its log")
            job = c.wait_until(lambda: (lambda j: j if "waiting for disk space" in
                                        j.get("reason", "") else None)(c.job(one)),
                               30, "the one-worker job's reason naming the wait")
            expect(job["state"] == "RUNNING" and "the weights file of step 6 does not fit"
                   in job["reason"], "the one-worker job should wait for space: %s: %s"
                   % (job["state"], job["reason"]))
            os.remove(ballast)
            done = c.wait_state(one, FINAL, 120)
            expect(done["state"] == "SUCCEEDED", "one worker, after space was freed: %s: %s"
                   % (done["state"], done.get("reason")))
            expect(os.path.isfile(os.path.join(small, one, "model.safetensors")),
                   "no weights in %s" % os.path.join(small, one))
            print("one worker, its weights into a full tmpfs: waited (%s); SUCCEEDED"
                  % lines[0].strip())


def case_coordinator_db_disk_full(args):
    """The coordinator's --db on a 2 MiB tmpfs that a ballast file fills while a one-worker job
    trains (mounted by the test; skipped with a message when mounting is not permitted): its
    writes fail ("database or disk is full"), dtrain_coordinator_db_errors_total{kind="full"}
    counts them (the CoordinatorDatabaseFailing alert's series) and the worker keeps training
    and retrying its reports; the job's status names the database, not a stall. The job ends on
    its worker while the disk is full and stays RUNNING (its outcome waits in the worker's
    queue, however long: no retry period drops it). Once the test deletes the ballast, the job
    SUCCEEDS with every step recorded, none lost or doubled."""
    with Cluster(args.binaries, "coordinator_db_disk_full") as c, \
            small_tmpfs(c, "2m", "coordinator_db_disk_full") as small:
        if small is not None:
            c.db = os.path.join(small, "coordinator.db")
            c.write_corpus()
            c.start_coordinator()
            c.start_worker("w1", extra=["--test_only_step_delay=50ms"])
            c.wait_workers({"w1": "IDLE"})
            steps = 80
            job_id = c.submit(c.write_spec("db.json", small_job_spec("", steps, name="db-full")))
            c.wait_step(job_id, 3, 60)
            ballast = os.path.join(small, "ballast")
            with open(ballast, "wb") as f:
                try:
                    f.write(b"\0" * (2 << 20))
                except OSError:
                    pass  # full: that is the point
            url = "http://127.0.0.1:%d/metrics" % c.metrics_ports["coordinator"]

            def full_errors():
                with urllib.request.urlopen(url, timeout=10) as r:
                    for line in r.read().decode().splitlines():
                        if line.startswith('dtrain_coordinator_db_errors_total{kind="full"}'):
                            return float(line.rsplit(" ", 1)[1])
                return 0
            counted = c.wait_until(full_errors, 60, "a failed write counted in "
                                   "dtrain_coordinator_db_errors_total{kind=\"full\"}")
            expect(c.workers["w1"].alive() and c.coordinator.alive(),
                   "a full database disk should stop neither daemon")
            # Its status says why no step arrives: the database, not a stalled job.
            job = c.wait_until(lambda: (lambda j: j if "steps not recorded" in
                                        j.get("reason", "") else None)(c.job(job_id)),
                               30, "the job's reason naming the database's refusals")
            expect("cannot write its database" in job["reason"] and
                   "database or disk is full" in job["reason"],
                   "the reason should name the full database: %s" % job["reason"])
            c.wait_until(lambda: "job %s succeeded" % job_id in c.workers["w1"].log_text(), 60,
                         "the job's end on its worker while the database is full")
            time.sleep(3 * c.heartbeat_s)
            job = c.job(job_id)
            expect(job["state"] == "RUNNING", "a job whose end cannot be recorded yet should stay "
                   "RUNNING: %s: %s" % (job["state"], job.get("reason")))
            os.remove(ballast)  # an operator frees space
            done = c.wait_state(job_id, FINAL, 180)
            expect(done["state"] == "SUCCEEDED", "after space was freed: %s: %s"
                   % (done["state"], done.get("reason")))
            recorded = sorted(losses(c, job_id))
            expect(recorded == list(range(1, steps + 1)), "the job's recorded steps: %d of %d, "
                   "first missing %s" % (len(recorded), steps,
                                         sorted(set(range(1, steps + 1)) - set(recorded))[:3]))
            log = c.coordinator.log_text()
            expect("database or disk is full" in log,
                   "the coordinator's log should name the full disk")
            print("coordinator db on a full tmpfs: %d failed write(s) counted; space freed: "
                  "SUCCEEDED with all %d steps recorded" % (counted, steps))


def case_checkpoint_default(args):
    """A one-worker job whose spec says nothing about checkpoints (no checkpoint.dir, no
    interval: README's tiny.json) checkpoints every 100 steps (plan/checkpoint_plan.h) into the
    worker's <data_root>/jobs/<job id>/; kill -9 of its worker after step 103 and a restart at
    once: the recovery resumes from step 100 (redoing fewer than an interval's steps, not all
    103) and the job SUCCEEDS. A late `dtrain watch` replays its states, steps and events in
    time order. A spec with checkpoint.interval_steps 0 gets a warning at submit
    ("turns periodic checkpoints off")."""
    with Cluster(args.binaries, "checkpoint_default") as c:
        delay = "--test_only_step_delay=40ms"  # the kill lands between steps 103 and 125
        c.write_corpus()
        c.start_coordinator()
        c.start_worker("w1", extra=[delay])
        c.wait_workers({"w1": "IDLE"})
        spec = small_job_spec("", 125, name="default", fault_tolerance={"max_restarts": 1})
        del spec["checkpoint"]
        rc, out, err = c.cli("--json", "submit", c.write_spec("default.json", spec), timeout=30)
        expect(rc == 0 and "warning" not in err, "submit: exit %d\n%s%s" % (rc, out, err))
        job_id = json.loads(out)["id"]
        job_dir = os.path.join(c.tmp, "data-w1", "jobs", job_id)
        c.wait_step(job_id, 103, 120)
        expect(os.path.isfile(os.path.join(job_dir, "step_00000100", "manifest.json")),
               "no sealed step 100 in %s: %s" % (job_dir, os.listdir(job_dir)))
        c.workers["w1"].signal(signal.SIGKILL)
        c.workers["w1"].wait(10)
        c.start_worker("w1", extra=[delay])
        done = c.wait_state(job_id, FINAL, 180)
        expect(done["state"] == "SUCCEEDED", "after kill -9: %s: %s"
               % (done["state"], done.get("reason")))
        r = one_recovery(done)
        redone = int(r.get("steps_redone", 0))
        expect(int(r.get("resumed_from_step", 0)) == 100 and 0 < redone < 100,
               "the recovery should resume from step 100 and redo fewer than 100 steps: %s" % r)
        steps = sorted(n for n in os.listdir(job_dir) if n.startswith("step_"))
        expect(steps == ["step_00000100", "step_00000125"], "sealed steps in %s: %s"
               % (job_dir, steps))

        # A late `watch` replays the run in time order: states, steps and events interleaved
        # (the events' times from `logs`, which has them).
        rc, out, err = c.cli("--json", "logs", job_id, timeout=30)
        event_times = {}
        for line in out.splitlines():
            e = json.loads(line)
            event_times.setdefault(e["text"], []).append(int(e["time_unix_ms"]))
        rc, out, err = c.cli("--json", "watch", job_id, timeout=60)
        times = []
        for line in out.splitlines():
            u = json.loads(line)
            if u["type"] == "event":
                times.append(event_times[u["text"]].pop(0))
            elif "time_unix_ms" in u:
                times.append(int(u["time_unix_ms"]))
        expect(len(times) > 125 and times == sorted(times),
               "a late watch should replay in time order: %d updates, first out of order at %s"
               % (len(times), next((i for i in range(1, len(times))
                                    if times[i] < times[i - 1]), None)))

        off = small_job_spec("", 500, name="off")
        off["checkpoint"] = {"interval_steps": 0}
        rc, out, err = c.cli("--json", "submit", c.write_spec("off.json", off), timeout=30)
        expect(rc == 0 and "warning: checkpoint.interval_steps=0 turns periodic checkpoints off"
               in err, "interval_steps 0 should be warned about at submit: exit %d\n%s%s"
               % (rc, out, err))
        c.cli("cancel", json.loads(out)["id"], timeout=30, check=True)
        print("no checkpoint settings, 125 steps, kill -9 after step %d: resumed from step 100, "
              "%d steps redone, SUCCEEDED; %s holds %s; interval_steps 0: %s"
              % (int(r.get("last_step", 0)), redone, job_dir, ", ".join(steps),
                 err.strip().splitlines()[-1]))


def case_checkpoint_disk_full_ranks(args):
    """A pp=2 job on two workers checkpointing every step into a 3 MiB tmpfs that a 1 MiB
    ballast file fills further (mounted by the test; skipped with a message when mounting is
    not permitted), keep_last 2: from the third step on a step does not fit, and every rank
    skips it (the rank that cannot hold its part says so in its entries; rank 0 then removes
    the step whole instead of sealing it) with an event naming the rank; training goes on.
    Once the test deletes the ballast (an operator freeing space), checkpoints seal again, the
    job SUCCEEDS with its weights exported, and no partial step remains."""
    with Cluster(args.binaries, "checkpoint_disk_full_ranks") as c, \
            small_tmpfs(c, "3m", "checkpoint_disk_full_ranks") as small:
        if small is not None:
            ballast = os.path.join(small, "ballast")
            with open(ballast, "wb") as f:
                f.write(b"\0" * (1 << 20))
            start(c, ["w1", "w2"])
            spec = small_job_spec(small, 30, 1, name="full-ranks", parallel={"pp": 2})
            spec["checkpoint"]["keep_last"] = 2
            job_id = c.submit(c.write_spec("full.json", spec))

            def skips():
                out = c.cli("logs", job_id, timeout=30)[1]
                return [l for l in out.splitlines()
                        if "skipped:" in l and "training goes on" in l]
            c.wait_until(skips, 120, "a skipped checkpoint in the job's log")
            job = c.job(job_id)
            expect(job["state"] == "RUNNING", "the job should go on after a skipped checkpoint: "
                   "%s: %s" % (job["state"], job.get("reason")))
            os.remove(ballast)  # room again
            done = c.wait_state(job_id, FINAL, 120)
            expect(done["state"] == "SUCCEEDED", "a full disk should not fail the job: %s: %s"
                   % (done["state"], done.get("reason")))
            skipped = skips()
            for line in skipped:
                ranks = re.findall(r"rank \d+: ", line.split(" skipped: ", 1)[1])
                expect(ranks and len(ranks) == len(set(ranks)),
                       "a skip should name each rank that could not hold its part once:\n%s"
                       % line)
            job_dir = os.path.join(small, job_id)
            steps = sorted(n for n in os.listdir(job_dir) if n.startswith("step_"))
            expect("step_00000030" in steps, "the last step is not sealed: %s" % steps)
            for name in steps:
                files = os.listdir(os.path.join(job_dir, name))
                expect("manifest.json" in files and not any(".tmp." in f for f in files),
                       "%s is a partial step: %s" % (name, files))
            expect(os.path.isfile(os.path.join(job_dir, "model.safetensors")),
                   "no exported weights in %s" % job_dir)
            print("pp=2, 3 MiB tmpfs with 1 MiB ballast, a checkpoint every step: %d skipped "
                  "(%s); ballast removed: SUCCEEDED, left %s"
                  % (len(skipped), skipped[0].strip(), ", ".join(steps)))
