"""dtrain-local as a user runs it: each bad input exits 1 with one error line naming the file or
flag and the problem, and writes nothing it was asked to save; a good run exits 0.

Usage (Bazel passes the binary): python3 dtrain_local_cli_test.py DTRAIN_LOCAL
The library-level tests (local_trainer_test, safetensors_test, token_dataset_test) check every
message in detail; this checks that the binary reports them instead of crashing.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

TINY = ["--vocab_size=256", "--context=16", "--n_layer=1", "--n_head=2", "--n_embd=16",
        "--device=cpu", "--threads=1", "--batch=2", "--seq=8"]
failures = []


def run(binary, args):
    p = subprocess.run([binary] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    return p.returncode, p.stderr


def expect_error(binary, name, args, parts, save_path=None):
    rc, err = run(binary, args)
    missing = [part for part in parts if part not in err]
    if rc != 1 or missing or "Segmentation" in err or "terminate called" in err:
        failures.append(f"{name}: exit {rc}, missing {missing} in stderr:\n{err[-800:]}")
    elif save_path is not None and os.path.exists(save_path):
        failures.append(f"{name}: failed but wrote {save_path}")
    else:
        print(f"ok   {name}: exit 1: {err.strip().splitlines()[-1]}")


def write_tokens(path, tokens, magic=20240520, version=1, count=None):
    """llm.c's token file: 256 int32 header (magic, version, token count), then uint16 tokens."""
    header = [0] * 256
    header[0], header[1] = magic, version
    header[2] = len(tokens) if count is None else count
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f]


def spec_cases(binary, tmp, text):
    """--spec JOB.json: the service's spec, names and defaults, in the run's own job directory."""
    spec = os.path.join(tmp, "job.json")
    ckpt = os.path.join(tmp, "ckpt")
    with open(spec, "w") as f:
        json.dump({"name": "tiny", "model": {"vocab_size": 256, "context": 16, "n_layer": 1,
                                             "n_head": 2, "n_embd": 16},
                   "dataset": text, "steps": 4, "batch_size": 2, "seq_len": 8, "device": "cpu",
                   "parallel": {"dp": 1, "pp": 1, "tp": 2},
                   "checkpoint": {"dir": ckpt, "interval_steps": 2}}, f)
    job = os.path.join(ckpt, "job-000000")
    log = os.path.join(tmp, "spec.jsonl")
    rc, err = run(binary, [f"--spec={spec}", "--threads=1", f"--log_json={log}"])
    expected = ["step_00000002", "step_00000004", "latest", "model.safetensors", "job.json"]
    if rc != 0 or any(not os.path.exists(os.path.join(job, e)) for e in expected):
        failures.append(f"--spec run: exit {rc}, {job} holds "
                        f"{os.listdir(job) if os.path.isdir(job) else None}:\n{err[-800:]}")
    elif "layout dp=1 pp=1 tp=2 runs on this one process" not in err:
        failures.append(f"--spec run: no note on the layout:\n{err[-800:]}")
    else:
        print(f"ok   --spec run: exit 0, {job} holds its checkpoints and weights")
    # The same run from flags: the service's defaults are dtrain-local's.
    flags_log = os.path.join(tmp, "flags.jsonl")
    rc, err = run(binary, TINY[:-2] + ["--n_layer=1", "--batch=2", "--seq=8", f"--data={text}",
                                       "--steps=4", f"--log_json={flags_log}"])
    if rc != 0 or losses(flags_log) != losses(log):
        failures.append(f"--spec and flags: losses {losses(log)} vs {losses(flags_log)}")
    else:
        print("ok   --spec and the same flags train to the same losses")

    before = {n: os.path.getmtime(os.path.join(job, n)) for n in os.listdir(job)}
    expect_error(binary, "--spec again into the same job directory", [f"--spec={spec}"],
                 [f"job directory {job} already holds latest and model.safetensors",
                  "pass another --job_id"])
    expect_error(binary, "--spec with a flag the spec sets",
                 [f"--spec={spec}", "--n_layer=3", "--batch=4"],
                 ["--n_layer, --batch cannot be combined with --spec", spec])
    expect_error(binary, "--spec resumed with steps not beyond the checkpoint",
                 [f"--spec={spec}", "--job_id=job-000001", f"--resume={job}"],
                 [f"steps=4 is not beyond step 4 of the checkpoint {job}/step_00000004"])
    if {n: os.path.getmtime(os.path.join(job, n)) for n in os.listdir(job)} != before:
        failures.append(f"refused --spec runs changed {job}")

    # resume_from naming a job id, as for the service, with more steps (--steps and --save
    # override the spec), into the run's own directory.
    with open(spec) as f:
        resume_spec = json.load(f)
    resume_spec["resume_from"] = "job-000000"
    spec2 = os.path.join(tmp, "resume.json")
    with open(spec2, "w") as f:
        json.dump(resume_spec, f)
    resumed = os.path.join(tmp, "resumed.safetensors")
    rc, err = run(binary, [f"--spec={spec2}", "--job_id=job-000002", "--steps=6",
                           "--threads=1", f"--save={resumed}"])
    if rc != 0 or not os.path.exists(resumed) or \
            f"resumed from {job}/step_00000004 at step 4" not in err or \
            not os.path.exists(os.path.join(ckpt, "job-000002", "step_00000006")):
        failures.append(f"--spec --resume --steps=6: exit {rc}:\n{err[-800:]}")
    else:
        print("ok   --spec --resume --steps=6: resumed from step 4 into job-000002")
    # --steps equal to its default (10) still overrides the spec's 4: given is given.
    ten_log = os.path.join(tmp, "ten.jsonl")
    rc, err = run(binary, [f"--spec={spec}", "--job_id=job-000003", "--steps=10",
                           "--threads=1", f"--log_json={ten_log}"])
    if rc != 0 or not os.path.exists(ten_log) or len(losses(ten_log)) != 10:
        failures.append(f"--spec --steps=10 (the flag's default): exit {rc}, "
                        f"{len(losses(ten_log)) if os.path.exists(ten_log) else 0} steps, want 10:"
                        f"\n{err[-800:]}")
    else:
        print("ok   --spec --steps=10 (the flag's default) trains 10 steps, not the spec's 4")
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        f.write('{"model": {"n_layer": 1}, "steps": 4}')
    expect_error(binary, "--spec of an invalid spec", [f"--spec={bad}"], [f"--spec={bad}"])
    expect_error(binary, "--spec of a missing file", [f"--spec={tmp}/nope.json"],
                 [f"{tmp}/nope.json"])


def main():
    binary = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="dtrain_local_cli_")
    text = os.path.join(tmp, "text.txt")
    with open(text, "w") as f:
        f.write("the quick brown fox jumps over the lazy dog. " * 20)
    save = os.path.join(tmp, "out.safetensors")

    # A good run first, so the failures below are the inputs' and not the setup's.
    rc, err = run(binary, TINY + [f"--data={text}", "--steps=2", f"--save={save}"])
    if rc != 0 or not os.path.exists(save):
        failures.append(f"good run: exit {rc}:\n{err[-800:]}")
    else:
        print("ok   good run: exit 0, weights saved")
        os.remove(save)

    # --op_profile: the table after the run, steps 2-3 (the first left out), the ops by shape.
    rc, err = run(binary, TINY + [f"--data={text}", "--steps=3", "--op_profile"])
    wanted = ["op profile over 2 steps", "MatmulForward N=16 C=16 OC=48", "AttentionBackward",
              "AdamWUpdate", "100.0%", "(every op)"]
    missing = [w for w in wanted if w not in err]
    if rc != 0 or missing:
        failures.append(f"--op_profile: exit {rc}, missing {missing}:\n{err[-1500:]}")
    else:
        print("ok   --op_profile: the table after the run")

    # A spec's matmul_precision below fp32 needs CUDA: refused with device cpu when planned.
    spec = os.path.join(tmp, "bf16.json")
    with open(spec, "w") as f:
        json.dump({"model": {"vocab_size": 256, "context": 16, "n_layer": 1, "n_head": 2,
                             "n_embd": 16},
                   "dataset": text, "steps": 2, "batch_size": 2, "seq_len": 8, "device": "cpu",
                   "matmul_precision": "bf16", "checkpoint": {"dir": os.path.join(tmp, "bf16")}},
                  f)
    expect_error(binary, "bf16 spec on the cpu", [f"--spec={spec}"],
                 ['matmul_precision="bf16" needs device "cuda"'])

    expect_error(binary, "unknown flag", TINY + ["--stepz=3"], ["stepz"])
    expect_error(binary, "heads not dividing width",
                 TINY + ["--n_head=3", f"--data={text}", "--steps=1"], ["n_head=3", "n_embd=16"])
    expect_error(binary, "missing data file",
                 TINY + [f"--data={tmp}/nope.bin", "--steps=1", f"--save={save}"],
                 [f"{tmp}/nope.bin"], save)
    expect_error(binary, "no --data", TINY + ["--steps=1"], ["--data is required"])
    short = os.path.join(tmp, "short.txt")
    with open(short, "w") as f:
        f.write("too short")
    expect_error(binary, "data shorter than one batch",
                 TINY + [f"--data={short}", "--steps=1", f"--save={save}"], [short], save)
    big_token = os.path.join(tmp, "big_token.bin")
    write_tokens(big_token, [1, 2, 3] * 20 + [300] + [4] * 20)
    expect_error(binary, "token id >= vocab",
                 TINY + [f"--data={big_token}", "--steps=4", f"--save={save}"],
                 [big_token, "300"], save)
    bad_magic = os.path.join(tmp, "bad_magic.bin")
    write_tokens(bad_magic, [1] * 100, magic=1234)
    expect_error(binary, "token file with a bad magic",
                 TINY + [f"--data={bad_magic}", "--steps=1"], [bad_magic, "magic"])

    # Truncated and mis-shaped --init files, made from a real save.
    init = os.path.join(tmp, "init.safetensors")
    rc, err = run(binary, TINY + ["--steps=0", f"--save={init}"])
    if rc != 0:
        failures.append(f"--steps=0 --save: exit {rc}:\n{err[-800:]}")
    else:
        with open(init, "rb") as f:
            blob = f.read()
        truncated = os.path.join(tmp, "truncated.safetensors")
        with open(truncated, "wb") as f:
            f.write(blob[: len(blob) // 2])
        expect_error(binary, "truncated --init",
                     TINY + [f"--init={truncated}", f"--data={text}", "--steps=1"], [truncated])
        expect_error(binary, "--init of another model's shape",
                     TINY + ["--n_embd=32", f"--init={init}", f"--data={text}", "--steps=1"],
                     [init, "wte.weight"])
    expect_error(binary, "bf16 on the CPU",
                 TINY + ["--matmul_precision=bf16", f"--data={text}", "--steps=1"],
                 ["matmul precision bf16 needs a CUDA device"])
    expect_error(binary, "unknown precision",
                 TINY + ["--matmul_precision=fp8", f"--data={text}", "--steps=1"],
                 ["--matmul_precision", "\"fp8\""])
    expect_error(binary, "unknown device", TINY + ["--device=tpu", "--steps=0"], ["\"tpu\""])

    spec_cases(binary, tmp, text)

    if failures:
        print("\n".join("FAIL " + f for f in failures))
        print(f"dtrain_local_cli_test: {len(failures)} failed")
        sys.exit(1)
    print("dtrain_local_cli_test: all passed")


if __name__ == "__main__":
    main()
