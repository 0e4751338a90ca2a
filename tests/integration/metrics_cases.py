"""A job's outputs outside dtrain: text sampled from it (`dtrain sample JOB`), and its scalars: the TensorBoard event file the reporting rank writes into the
job's directory as it trains, and `dtrain export-metrics` (csv, tfevents), read back by an
independent reader: TFRecord framing with struct, CRC-32C written here from its definition
(reflected polynomial 0x82F63B78, masked as TensorFlow's record writer masks it), and the
Event / Summary protobuf wire format decoded by hand (field numbers as TensorBoard's)."""

import glob
import json
import os
import struct
import urllib.request

from harness import Cluster, TestFailure, expect, small_job_spec


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """Every record's data; fails on a bad length CRC, data CRC or a truncated record."""
    with open(path, "rb") as f:
        blob = f.read()
    out, pos = [], 0
    while pos < len(blob):
        expect(pos + 12 <= len(blob), "%s: truncated record header at byte %d" % (path, pos))
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        expect(length_crc == masked_crc(header), "%s: bad length CRC at byte %d" % (path, pos))
        data = blob[pos + 12:pos + 12 + length]
        expect(len(data) == length and pos + 16 + length <= len(blob),
               "%s: truncated record at byte %d" % (path, pos))
        (data_crc,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
        expect(data_crc == masked_crc(data), "%s: bad data CRC at byte %d" % (path, pos))
        out.append(data)
        pos += 16 + length
    return out


def fields(buf):
    """Protobuf wire format: [(field number, value)]; varint ints, fixed64/32 bytes, bytes."""
    out, pos = [], 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise TestFailure("unexpected wire type %d" % wire)
        out.append((number, value))
    return out


def varint(buf, pos):
    value, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def events(path):
    """(file_version, [(step, {tag: float32})]) of an event file."""
    version, steps = None, []
    for data in records(path):
        step, scalars = 0, {}
        for number, value in fields(data):
            if number == 2:  # Event.step
                step = value
            elif number == 3:  # Event.file_version
                version = value.decode()
            elif number == 5:  # Event.summary
                for n, v in fields(value):
                    if n == 1:  # Summary.value
                        f = dict(fields(v))
                        scalars[f[1].decode()] = struct.unpack("<f", f[2])[0]
        if scalars:
            steps.append((step, scalars))
    return version, steps


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def expect_scalars_equal(what, got, history):
    expect([s for s, _ in got] == [h["step"] for h in history],
           "%s: steps %s, history %s" % (what, [s for s, _ in got], [h["step"] for h in history]))
    for (step, scalars), h in zip(got, history):
        want = {"loss": h["loss"], "lr": h["lr"], "grad_norm": h["grad_norm"],
                "tokens_per_s": h["tokens_per_s"]}
        if "val_loss" in h:
            want["val_loss"] = h["val_loss"]
        expect(set(scalars) == set(want), "%s step %d: tags %s, want %s" %
               (what, step, sorted(scalars), sorted(want)))
        for tag, value in want.items():
            expect(scalars.get(tag) == f32(value),
                   "%s step %d %s: %r, history %r" % (what, step, tag, scalars.get(tag), value))


def case_metrics_export(args):
    """A 12-step job: its directory holds an event file whose every CRC is valid and whose
    scalars equal the job's history (`watch --json`) as float32; `export-metrics --format=
    tfevents` reads back the same, `--format=csv` the history's exact numbers; an unknown
    format is exit 2; a running job's export holds its steps so far."""
    with Cluster(args.binaries, "metrics_export") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_worker("w1")
        c.wait_workers({"w1": "IDLE"})
        ckpt = os.path.join(c.workdir, "ckpt")
        spec = c.write_spec("job.json", small_job_spec(ckpt, steps=12))
        rc, out, err = c.cli("submit", spec, "--watch", timeout=300)
        expect(rc == 0, "submit --watch exited %d: %s" % (rc, err))
        job_id = out.split()[1]
        rc, out, err = c.cli("watch", job_id, "--json", check=True)
        history = [json.loads(line) for line in out.splitlines()]
        history = [h for h in history if h["type"] == "step"]
        expect(len(history) == 12, "history has %d steps" % len(history))

        files = glob.glob(os.path.join(ckpt, job_id, "events.out.tfevents.*"))
        expect(len(files) == 1, "want one event file in the job's directory, got %s" % files)
        version, got = events(files[0])
        expect(version == "brain.Event:2", "file_version %r" % version)
        expect_scalars_equal("job directory", got, history)

        exported = os.path.join(c.tmp, "metrics.tfevents")
        c.cli("export-metrics", job_id, "--format=tfevents", "-o", exported, check=True)
        expect_scalars_equal("export-metrics tfevents", events(exported)[1], history)

        rc, out, err = c.cli("export-metrics", job_id, check=True)
        lines = out.splitlines()
        expect(lines[0] == "step,loss,lr,grad_norm,tokens_per_s,time_unix_ms,val_loss", lines[0])
        for line, h in zip(lines[1:], history):
            step, loss, lr, grad_norm, tps, t, val_loss = line.split(",")
            expect(val_loss == "", "no evaluation, yet val_loss %r" % val_loss)
            expect((int(step), float(loss), float(lr), float(grad_norm), float(tps), int(t)) ==
                   (h["step"], h["loss"], h["lr"], h["grad_norm"], h["tokens_per_s"],
                    h["time_unix_ms"]), "csv %r, history %r" % (line, h))
        expect(len(lines) == 13, "csv has %d lines" % len(lines))

        rc, out, err = c.cli("export-metrics", job_id, "--format=xml")
        expect(rc == 2 and "csv or tfevents" in err, "bad format: %d %r" % (rc, err))

        # A job that is still running: its steps so far, up to its latest when asked.
        running = c.submit(c.write_spec("long.json", small_job_spec(ckpt, steps=100000)))
        c.wait_step(running, 5, 60)
        so_far = os.path.join(c.tmp, "so_far.csv")
        rc, out, err = c.cli("export-metrics", running, "-o", so_far, timeout=60)
        expect(rc == 0 and "its steps so far" in out, "a running job: %d %r %r" % (rc, out, err))
        with open(so_far) as f:
            rows = f.read().splitlines()[1:]
        expect(len(rows) >= 5 and [int(r.split(",")[0]) for r in rows] ==
               list(range(1, len(rows) + 1)), "a running job's steps: %s" % rows[:3])
        c.cli("cancel", running, check=True)
        print("metrics_export: %d steps; event file %s (%d bytes): every CRC valid, every scalar "
              "equal" % (len(history), os.path.basename(files[0]), os.path.getsize(files[0])))


def case_sample_job(args):
    """`dtrain sample JOB` is drawn by a worker of the job's host (the coordinator's SampleJob; no
    dtrain-sample where the CLI runs) and equals `dtrain sample DIR` of the job's newest sealed
    checkpoint, greedy; with the job's worker stopped, another worker of the host draws it; with
    none left, the refusal names the host; an unknown job is 4; the coordinator counts them."""
    with Cluster(args.binaries, "sample_job") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_worker("w1")
        c.wait_workers({"w1": "IDLE"})
        ckpt = os.path.join(c.workdir, "ckpt")
        spec = c.write_spec("job.json", small_job_spec(ckpt, steps=10, interval=5))
        rc, out, err = c.cli("submit", spec, "--watch", timeout=300)
        expect(rc == 0, "submit --watch exited %d: %s" % (rc, err))
        job_id = out.split()[1]
        flags = ["--prompt=The ", "--tokens=12", "--temperature=0", "--json"]
        os.environ["DTRAIN_SAMPLE"] = "/nonexistent/dtrain-sample"  # nothing drawn here
        rc, by_job, err = c.cli("sample", job_id, *flags, check=True)
        os.environ["DTRAIN_SAMPLE"] = args.sample
        rc, by_dir, _ = c.cli("sample", os.path.join(ckpt, job_id), "--device=cpu", *flags,
                              check=True)
        got, want = json.loads(by_job), json.loads(by_dir)
        drawn = {k: got[k] for k in ("prompt_tokens", "tokens", "text")}
        expect(drawn == want, "by job %r, by directory %r" % (by_job, by_dir))
        expect(got["worker_id"] == "w1" and got["source"].startswith("checkpoint " + ckpt),
               "drawn by %r from %r" % (got["worker_id"], got["source"]))
        expect(len(got["tokens"]) == 12 and got["text"].startswith("The "), "sample: %r" % got)
        expect("drawn by worker w1" in err, "stderr: %r" % err)
        # A prompt of bytes that are not UTF-8 (Latin-1 "été"): a byte-level model takes them.
        rc, latin, err = c.cli("sample", job_id, "--prompt=\udce9t\udce9", "--tokens=4",
                               "--temperature=0", "--json", check=True)
        expect(json.loads(latin)["prompt_tokens"] == [0xE9, 0x74, 0xE9], "Latin-1: %r" % latin)
        expect("drawing a sample of %s" % job_id in c.workers["w1"].log_text(),
               "w1's log does not say it drew the sample")
        # No prompt: a byte-level model has no start token, and the error says what to give.
        rc, _, err = c.cli("sample", job_id, "--tokens=4")
        expect(rc == 2 and "has no start token" in err and "--prompt=TEXT" in err,
               "sample without a prompt: exit %d, %r" % (rc, err))
        # Rank 0's worker gone: another live worker of the host (testhost) draws it.
        c.start_worker("w2")
        c.wait_workers({"w2": "IDLE"})
        c.workers["w1"].stop()
        rc, again, err = c.cli("sample", job_id, *flags, check=True)
        expect(json.loads(again)["worker_id"] == "w2", "after w1 stopped: %r" % again)
        expect(json.loads(again)["text"] == got["text"], "w2 drew %r" % again)
        c.workers["w2"].stop()
        rc, out, err = c.cli("sample", job_id, *flags)
        expect(rc != 0 and "no live worker can read" in err and "testhost" in err,
               "no worker left: exit %d: %s" % (rc, err))
        rc, out, err = c.cli("sample", "job-000099", *flags)
        expect(rc == 4, "unknown job: exit %d (want 4): %s" % (rc, err))
        url = "http://127.0.0.1:%d/metrics" % c.metrics_ports["coordinator"]
        with urllib.request.urlopen(url, timeout=10) as r:
            counted = {line.split('"')[1]: float(line.rsplit(" ", 1)[1])
                       for line in r.read().decode().splitlines()
                       if line.startswith("dtrain_coordinator_samples_total{")}
        # Refused: no prompt (by the worker), no worker, an unknown job.
        expect(counted.get("drawn") == 3 and counted.get("refused") == 3,
               "dtrain_coordinator_samples_total: %r" % counted)
        print("sample_job: %s -> %r" % (job_id, got["text"]))
