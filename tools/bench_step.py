#!/usr/bin/env python3
"""Training-step throughput: dtrain-local vs PyTorch (the speed peer), same model, same work.

    python3 tools/bench_step.py [--dtrain_local bazel-bin/worker/dtrain-local] [--threads 1,2]

For each thread count, runs dtrain-local and tests/pytorch/gpt_reference.py (PyTorch, run with
/usr/bin/python3, Debian's python with torch) on the reference config (vocab 256, context 128,
4 layers, 4 heads, C=256; batch 8, T=128) from the same init and data, for --warmup steps then
--steps measured steps, with the same threads on both sides: --threads=N for dtrain-local,
torch.set_num_threads(N) for torch, and OMP_NUM_THREADS / OPENBLAS_NUM_THREADS = N in both
environments (OpenBLAS reads them when it loads). A step is forward + backward + clip + AdamW;
each side reports tokens/s per step in its --log_json (B*T / step time), and this tool takes
the median over the measured steps. As a second opinion that background load barely moves,
tokens per CPU-second of each process (a warm-up-only run subtracted from the full runs).
Prints a table and one machine-readable JSON line (prefix "BENCH_JSON "). Uses only the
standard library itself.

Every run is a fresh process (neither side inherits the other's thread pools, allocator or
caches), and the rounds alternate which side goes first. Each run records the machine's load
average when it started and the cores it used (its CPU seconds / wall seconds): a side that
used more cores than --threads is flagged, as its tokens/s is then not an N-thread figure.
That is what makes a plain PyTorch script look faster than this benchmark's PyTorch side:
torch.set_num_threads(N) bounds PyTorch's OpenMP pool but not OpenBLAS's own pthread pool
(Debian's torch calls OpenBLAS, which starts one thread per core unless OPENBLAS_NUM_THREADS is
set before it loads), so a script that only calls torch.set_num_threads(1) runs its GEMMs, ~75%
of the step, on every core. gpt_reference.py and this tool set the variables first.
With more than one thread each side's idle OpenMP threads wait as they do at their best
(--dtrain_omp_wait_policy, --torch_omp_wait_policy; --omp_wait_policy sets both): PyTorch with
OMP_WAIT_POLICY=PASSIVE, since with libgomp's default its OpenMP workers spin after every
parallel region on the core OpenBLAS's pthread needs for its GEMMs (2.6x slower at 2 threads
under load, 3x idle); dtrain-local with GOMP_SPINCOUNT=2000, as deploy/ runs every worker: it
has one thread pool (OpenBLAS runs single-threaded inside its OpenMP splits), so a short spin
catches the next region without taking a core from its own GEMMs, and gives way to other
processes about as well as PASSIVE (docs/PERFORMANCE.md, "OpenMP's wait").

--smoke: a tiny config and 2 steps on 1 thread, to check in CI that the benchmark runs end to
end and prints its JSON (no timing is asserted).
"""

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT_REF = os.path.join(ROOT, "tests", "pytorch", "gpt_reference.py")


def make_text(n_bytes, seed=1):
    words = ("the of and to in a is that for it as was with be by on not he this are or his "
             "from at which but have an they you were her she there been one all we their has "
             "would when if so no will more can out up into do time some could them than then "
             "now only its first new over also after model train step loss token weight layer "
             "gradient batch learning rate small large value order").split()
    rng = random.Random(seed)
    out, size = [], 0
    while size < n_bytes:
        s = " ".join(rng.choice(words) for _ in range(rng.randint(4, 14)))
        s = s[0].upper() + s[1:] + rng.choice([".", "?", "!", ","]) + " "
        out.append(s)
        size += len(s)
    return "".join(out).encode("ascii")[:n_bytes]


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_logged(cmd, env, log_path, what, timeout):
    """Runs one training in a fresh process; returns (log records, wall seconds, CPU seconds of
    the process, 1-minute load average when it started)."""
    load = os.getloadavg()[0]
    c0 = children_cpu()
    t0 = time.time()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-3000:])
        raise SystemExit(f"bench_step: {what} exited with {p.returncode}: {' '.join(cmd)}")
    with open(log_path) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    return recs, wall, children_cpu() - c0, load


def summarize(runs, warmup):
    """runs: [(records, wall, cpu)]; the median etc. over the steady steps of every run."""
    steady = [r["tokens_per_s"] for recs, _, _, _ in runs for r in recs if r["step"] > warmup]
    if not steady:
        raise SystemExit("bench_step: no steady-state steps logged")
    recs = runs[0][0]
    loads = [load for _, _, _, load in runs]
    return {"median": statistics.median(steady), "min": min(steady), "max": max(steady),
            "n": len(steady), "loss_step1": recs[0]["loss"], "loss_last": recs[-1]["loss"],
            "load_min": min(loads), "load_max": max(loads),
            "cores_used": max(cpu / wall for _, wall, cpu, _ in runs if wall > 0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtrain_local", default=os.path.join(ROOT, "bazel-bin/worker/dtrain-local"))
    ap.add_argument("--torch_python", default="/usr/bin/python3")
    ap.add_argument("--gpt_reference", default=GPT_REF, help="the PyTorch side's script")
    policies = ["PASSIVE", "ACTIVE", "DEFAULT", "SHORT_SPIN"]
    ap.add_argument("--dtrain_omp_wait_policy", default="SHORT_SPIN", choices=policies,
                    help="how dtrain-local's idle OpenMP threads wait (see the docstring): "
                    "SHORT_SPIN, GOMP_SPINCOUNT=2000, as deploy/ runs every worker; PASSIVE and "
                    "ACTIVE: OMP_WAIT_POLICY; DEFAULT: neither set, libgomp's long spin")
    ap.add_argument("--torch_omp_wait_policy", default="PASSIVE", choices=policies,
                    help="how PyTorch's idle OpenMP threads wait: PASSIVE, its best (see the "
                    "docstring)")
    ap.add_argument("--omp_wait_policy", choices=policies,
                    help="sets both of the above")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--steps", type=int, default=30, help="measured steps")
    ap.add_argument("--warmup", type=int, default=5, help="unmeasured first steps")
    ap.add_argument("--vocab_size", type=int, default=256)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--n_layer", type=int, default=4)
    ap.add_argument("--n_head", type=int, default=4)
    ap.add_argument("--n_embd", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--only", choices=["dtrain", "torch"], help="run one side only")
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds per thread count, dtrain and torch alternating; the median is "
                         "over the steady steps of all rounds (evens out background load)")
    ap.add_argument("--timeout", type=int, default=1800, help="per run, seconds")
    ap.add_argument("--smoke", action="store_true",
                    help="CI check that it runs: tiny config, 1 thread, 2+1 steps, 2 rounds")
    args = ap.parse_args()
    if args.omp_wait_policy:
        args.dtrain_omp_wait_policy = args.torch_omp_wait_policy = args.omp_wait_policy
    gpt_ref = os.path.abspath(args.gpt_reference)
    if args.smoke:
        args.threads, args.steps, args.warmup, args.repeats = "1", 2, 1, 2
        args.vocab_size, args.context, args.n_layer, args.n_head, args.n_embd = 256, 16, 1, 2, 32
        args.batch, args.seq = 2, 16

    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    total = args.warmup + args.steps
    cfg = {k: getattr(args, k) for k in ("vocab_size", "context", "n_layer", "n_head", "n_embd")}
    cfg_flags = [f"--{k}={v}" for k, v in cfg.items()]
    dtrain = os.path.abspath(args.dtrain_local)
    if args.only != "torch" and not os.access(dtrain, os.X_OK):
        raise SystemExit(f"bench_step: no dtrain-local at {dtrain} (bazel build //worker:dtrain-local)")

    results = []
    with tempfile.TemporaryDirectory(prefix="bench_step_") as tmp:
        data = os.path.join(tmp, "data.txt")
        with open(data, "wb") as f:  # enough for every step without wrapping around
            f.write(make_text(args.batch * args.seq * total + 1))
        init = os.path.join(tmp, "init.safetensors")
        subprocess.run([args.torch_python, gpt_ref, "init"] + cfg_flags +
                       ["--seed=1337", f"--out={init}", "--threads=1"], check=True)
        common = [f"--init={init}", f"--data={data}", f"--steps={total}",
                  f"--batch={args.batch}", f"--seq={args.seq}", "--lr=6e-4"]
        for n in threads:
            env = dict(os.environ, OMP_NUM_THREADS=str(n), OPENBLAS_NUM_THREADS=str(n),
                       MKL_NUM_THREADS=str(n))
            side_env = {}
            for side in ("dtrain", "torch"):
                side_env[side] = dict(env)
                policy = getattr(args, f"{side}_omp_wait_policy")
                side_env[side].pop("OMP_WAIT_POLICY", None)
                side_env[side].pop("GOMP_SPINCOUNT", None)
                if policy == "SHORT_SPIN":
                    side_env[side]["GOMP_SPINCOUNT"] = "2000"
                elif policy != "DEFAULT":
                    side_env[side]["OMP_WAIT_POLICY"] = policy
            row = {"threads": n}
            runs = {"dtrain": [], "torch": []}
            for rep in range(args.repeats):
                # Odd rounds run PyTorch first, so neither side always follows the other.
                for side in (("dtrain", "torch") if rep % 2 == 0 else ("torch", "dtrain")):
                    if args.only not in (None, side):
                        continue
                    log = os.path.join(tmp, f"{side}_{n}_{rep}.jsonl")
                    if side == "dtrain":
                        cmd = [dtrain] + cfg_flags + common + ["--device=cpu", f"--threads={n}"]
                    else:
                        cmd = ([args.torch_python, gpt_ref, "train"] + cfg_flags + common +
                               [f"--threads={n}"])
                    runs[side].append(run_logged(cmd + [f"--log_json={log}"], side_env[side], log,
                                                 "dtrain-local" if side == "dtrain" else
                                                 "gpt_reference (torch)", args.timeout))
            for side, rs in runs.items():
                if not rs:
                    continue
                row[side] = dict(summarize(rs, args.warmup),
                                 wall_s=round(sum(w for _, w, _, _ in rs), 2))
                # Load-insensitive second opinion: CPU seconds per measured step, from a run of
                # the warm-up steps only subtracted from the full runs (start-up, init and
                # warm-up cancel). tokens per CPU-second; with N threads it counts all of them.
                log = os.path.join(tmp, f"{side}_{n}_short.jsonl")
                short = [a for a in common if not a.startswith("--steps=")] + [
                    f"--steps={args.warmup}"]
                cmd = ([dtrain] + cfg_flags + short + ["--device=cpu", f"--threads={n}"]
                       if side == "dtrain" else
                       [args.torch_python, gpt_ref, "train"] + cfg_flags + short +
                       [f"--threads={n}"])
                _, _, cpu_short, _ = run_logged(cmd + [f"--log_json={log}"], side_env[side], log,
                                             f"{side} (warm-up only)", args.timeout)
                per_step = (statistics.mean(c for _, _, c, _ in rs) - cpu_short) / args.steps
                row[side]["tokens_per_cpu_s"] = (args.batch * args.seq / per_step
                                                 if per_step > 0 else None)
                if row[side]["cores_used"] > n * 1.1 + 0.1:
                    print(f"bench_step: WARNING: {side} used {row[side]['cores_used']:.2f} cores "
                          f"with --threads={n}: its tokens/s is not a {n}-thread figure",
                          file=sys.stderr)
            if "dtrain" in row and "torch" in row:
                row["ratio"] = row["dtrain"]["median"] / row["torch"]["median"]
            results.append(row)

    load = os.getloadavg()
    print(f"\nbench_step: {cfg}, batch {args.batch}, seq {args.seq}; median tokens/s over "
          f"{args.steps} steps after {args.warmup} warm-up steps x {args.repeats} round(s) "
          f"(min..max in brackets); {os.cpu_count()} cores, load average {load[0]:.2f} "
          f"(other processes running distort the numbers)")
    print(f"{'threads':>7s} {'dtrain-local tok/s':>28s} {'torch tok/s':>28s} {'dtrain/torch':>12s}"
          f" {'tok/CPU-s dtrain, torch, ratio':>32s} {'step-1 loss dtrain/torch':>26s}"
          f" {'load at start d, t':>22s} {'cores used d, t':>16s}")

    def cell(r):
        return (f"{r['median']:9.1f} [{r['min']:.0f}..{r['max']:.0f}]" if r else "-")

    for row in results:
        d, t = row.get("dtrain"), row.get("torch")
        ratio = f"{row['ratio']:.3f}" if "ratio" in row else "-"
        losses = (f"{d['loss_step1']:.5f}/{t['loss_step1']:.5f}" if d and t else "-")
        dc = d.get("tokens_per_cpu_s") if d else None
        tc = t.get("tokens_per_cpu_s") if t else None
        cpu = ", ".join([f"{dc:.0f}" if dc else "-", f"{tc:.0f}" if tc else "-",
                         f"{dc / tc:.3f}" if dc and tc else "-"])
        loads = ", ".join(f"{r['load_min']:.1f}..{r['load_max']:.1f}" if r else "-"
                          for r in (d, t))
        cores = ", ".join(f"{r['cores_used']:.2f}" if r else "-" for r in (d, t))
        print(f"{row['threads']:7d} {cell(d):>28s} {cell(t):>28s} {ratio:>12s} {cpu:>32s} "
              f"{losses:>26s} {loads:>22s} {cores:>16s}")
    print("BENCH_JSON " + json.dumps({
        "bench": "bench_step", "config": cfg, "batch": args.batch, "seq": args.seq,
        "warmup_steps": args.warmup, "measured_steps": args.steps, "repeats": args.repeats,
        "cpu_count": os.cpu_count(), "loadavg_1min": round(load[0], 2),
        "omp_wait_policy": {"dtrain": args.dtrain_omp_wait_policy,
                            "torch": args.torch_omp_wait_policy}, "results": [
            {"threads": r["threads"],
             "dtrain_tokens_per_s": r.get("dtrain", {}).get("median"),
             "torch_tokens_per_s": r.get("torch", {}).get("median"),
             "ratio_dtrain_over_torch": r.get("ratio"),
             "dtrain_tokens_per_cpu_s": r.get("dtrain", {}).get("tokens_per_cpu_s"),
             "torch_tokens_per_cpu_s": r.get("torch", {}).get("tokens_per_cpu_s"),
             "dtrain_loss_step1": r.get("dtrain", {}).get("loss_step1"),
             "torch_loss_step1": r.get("torch", {}).get("loss_step1"),
             **{f"{side}_{k}": r[side][k] for side in ("dtrain", "torch") if side in r
                for k in ("load_min", "load_max", "cores_used")}}
            for r in results]}))
    if args.smoke:  # the two sides ran the same model on the same data: same first loss
        for r in results:
            d, t = r.get("dtrain"), r.get("torch")
            if d and t and abs(d["loss_step1"] - t["loss_step1"]) > 1e-4:
                raise SystemExit(f"bench_step: step-1 losses differ: dtrain {d['loss_step1']}, "
                                 f"torch {t['loss_step1']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
