#!/usr/bin/env python3
"""Collectives: dtrain's ring all-reduce vs torch.distributed's gloo backend, and dtrain's
pipeline stream vs iperf3, on one host, in one run, with this machine's memcpy bandwidth
measured in the same run; with --tls, dtrain over gRPC with TLS off and on side by side.

    /usr/bin/python3 tools/bench_allreduce.py [--ranks 2,4] [--sizes_mib 1,2,4,8,16,32,64]
        [--rounds 3] [--seconds 2] [--p2p_sizes_mib 1,16,64] [--benchmark PATH]
        [--paths job,plain,hier,shm,grpc,grpc+tls] [--tls] [--no_gloo] [--dtrain PATH] [--hosts 2]

Paths (--paths, default `job`): how dtrain's ranks move data. `job` is what a job does: mutual
TLS on every stream (the `worker` certificate of `dtrain certs init` on every rank); when every
rank is on one host (proved by the set-up handshake), the all-reduce runs over buffers in one
shared-memory segment that every rank maps (SharedAllReduce, zero-copy, as a job's data-parallel
gradient buckets), else the ring, through shared-memory rings between ranks of one host and,
across hosts, TLS 1.3 data connections of the transport's own, keyed by a pre-shared key sent on
the mutual-TLS stream (worker/comm/grpc/tls_link.h); `job-stream` is `job` with the gRPC stream
across hosts (mutual TLS, the path before the data connections), `job-k<N>` `job` with N data
connections per pair; `shm` forces the ring through the shared-memory rings, without TLS,
failing unless shared memory is used (the same-host path before shared buffers, still what a
pipeline's activations and a multi-host ring use); `grpc` and `grpc+tls` force the gRPC stream,
plaintext or mutual TLS; `plain` is `job` with plaintext streams; `hier` is `job` with the
hierarchical all-reduce (HierarchicalAllReduce, each rank's host from its address, as the
gradient sync picks it; the ring with one host). Every path gets its table against gloo and
iperf3; --tls adds grpc and
grpc+tls and their table side by side (and `job` against `plain` when both run).

Two hosts (--hosts 2, as root; tools/bench_hosts.py): two network namespaces joined by a veth
pair, addresses from 198.18.0.0/15, each with a /dev/shm of its own; ranks in blocks (2 ranks:
one per host; 4 ranks: 0-1 on the first, 2-3 on the second), so ranks of one host share memory
and cross-host traffic crosses the veth; gloo (GLOO_SOCKET_IFNAME the veth) and iperf3 (client
on the second host, server on the first) across the same veth. Default paths: job,plain. The
namespaces go at exit.

All-reduce: for each rank count, `--rounds` rounds; a round runs dtrain
(//worker/comm:allreduce_benchmark, one process per rank, 127.0.0.1) on each path and gloo
(torch.distributed, one /usr/bin/python3 process per rank, torch.set_num_threads(1)) on every
size, which one first alternating between rounds so slow spells of background load hit both
(the table also gives the ratio of each round, whose runs saw the same minutes of load).
Both sum float32 tensors of the same sizes, time the same way (warm-up, then as many iterations
as fill --seconds, iteration count fixed by rank 0, mean time per all-reduce on rank 0) and
report algbw = bytes / time and busbw = algbw * 2(n-1)/n (nccl-tests). The table gives the
median over rounds, and the ratio of medians. As a second opinion that background load barely
moves, CPU-seconds per all-reduce summed over all ranks' processes (all their threads).

Point-to-point: rank 0 streams activations to rank 1 (two sends in flight) for each
--p2p_sizes_mib, against iperf3 (one TCP stream, loopback) over the same rounds.

memcpy: each round also times one thread's memcpy of every size (allreduce_benchmark
--mode=memcpy); the tables give busbw as a fraction of it, the ceiling of any same-host path.

TLS (--tls): every round also runs dtrain with mutual TLS on every stream, as the workers run
it (the `worker` certificate of `dtrain certs init` on every rank, gRPC's TLS over the same
loopback TCP), all-reduce and stream alike, so the two see the same background load; the order
of the implementations rotates between rounds. --no_gloo leaves gloo out (plaintext against
TLS only). Extra tables: busbw and stream GB/s with TLS off and on, their ratio, and CPU.

Prints tables and one JSON line (prefix "BENCH_JSON "). Builds the benchmark (and with --tls the
dtrain CLI, for `dtrain certs init`) with `bazel build -c opt` unless --benchmark (and --dtrain)
are given; needs iperf3 (tools/setup.sh installs it).
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from bench_hosts import Hosts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_PYTHON = os.environ.get("TORCH_PYTHON", "/usr/bin/python3")  # Debian's has python3-torch

GLOO_WORKER = r'''
import json, resource, sys, time
import torch, torch.distributed as dist

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

rank, n, port, seconds = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[5])
master = sys.argv[6]  # rank 0's address
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"tcp://{master}:{port}", rank=rank, world_size=n)
for mib in sys.argv[4].split(","):
    nbytes = int(float(mib) * (1 << 20)) // 4 * 4
    x = torch.zeros(nbytes // 4)
    dist.barrier()
    t0 = time.time()
    for _ in range(2):
        dist.all_reduce(x)
    per = (time.time() - t0) / 2
    iters = torch.tensor([max(5, min(1000, int(seconds / max(per, 1e-6))))])
    dist.broadcast(iters, 0)  # every rank runs rank 0's count
    iters = int(iters.item())
    dist.barrier()
    c0, t0 = cpu(), time.time()
    for _ in range(iters):
        dist.all_reduce(x)
    t = (time.time() - t0) / iters
    c = (cpu() - c0) / iters
    alg = nbytes / t / 1e9
    print(json.dumps({"impl": "gloo", "rank": rank, "ranks": n, "bytes": nbytes, "iters": iters,
                      "time_us": t * 1e6, "cpu_us": c * 1e6, "algbw_gbs": alg,
                      "busbw_gbs": alg * 2 * (n - 1) / n}), flush=True)
dist.destroy_process_group()
'''


def free_ports(k):
    socks, ports = [], []
    for _ in range(k):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def run_ranks(cmds, what, timeout, hosts):
    """Runs one process per rank (rank r on hosts.host_of(r, n)); returns their JSON lines."""
    n = len(cmds)
    by_host = {}
    for r, c in enumerate(cmds):
        by_host.setdefault(hosts.host_of(r, n), []).append(c)
    outdir = tempfile.mkdtemp(prefix="bench_ranks_")
    procs = [hosts.popen(h, group, outdir) for h, group in by_host.items()]
    try:
        for p in procs:
            p.wait(timeout=timeout)
        records, errors = [], []
        for h, group in by_host.items():
            for i in range(len(group)):
                with open(os.path.join(outdir, f"out.{h}.{i}")) as f:
                    records += [json.loads(l) for l in f if l.startswith("{")]
                with open(os.path.join(outdir, f"err.{h}.{i}")) as f:
                    errors.append(f.read()[-3000:])
        if any(p.returncode != 0 for p in procs):
            raise SystemExit(f"bench_allreduce: {what} failed:\n" + "\n".join(errors))
        return records
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)  # the ranks of that host, started by its shell
                p.wait()
        shutil.rmtree(outdir, ignore_errors=True)


# path -> (allreduce_benchmark --path, mutual TLS on the streams, its --allreduce, more flags)
PATHS = {"job": ("auto", True, "flat", []), "plain": ("auto", False, "flat", []),
         "job-stream": ("auto", True, "flat", ["--data_connections=0"]),
         "hier": ("auto", True, "hierarchical", []), "shm": ("shm", False, "flat", []),
         "grpc": ("grpc", False, "flat", []), "grpc+tls": ("grpc", True, "flat", []),
         # The TLS data connections a rank uses across hosts, forced between ranks of one host:
         # the encrypted path measured where no veth can be made (against `grpc`, plaintext).
         "sockets": ("sockets", True, "flat", [])}
# job-k<N>, sockets-k<N>: `job`, `sockets` with N data connections per pair of ranks.
for _k in (1, 2, 3, 4, 6, 8):
    PATHS[f"job-k{_k}"] = ("auto", True, "flat", [f"--data_connections={_k}"])
    PATHS[f"sockets-k{_k}"] = ("sockets", True, "flat", [f"--data_connections={_k}"])


def run_dtrain(binary, n, sizes, seconds, hosts, mode="allreduce", path="grpc", tls_dir=None):
    """One run of `path` (PATHS); tls_dir: a `dtrain certs init` directory."""
    peers = ",".join(f"{hosts.address(hosts.host_of(r, n))}:{p}"
                     for r, p in enumerate(free_ports(n)))
    flag, tls, algorithm, more = PATHS[path]
    extra = [f"--path={flag}", f"--allreduce={algorithm}"] + more + (
        [f"--tls_dir={tls_dir}"] if tls else [])
    cmds = [[binary, f"--rank={r}", f"--peers={peers}", f"--mode={mode}",
             f"--sizes_mib={sizes}", f"--seconds={seconds}"] + extra for r in range(n)]
    return run_ranks(cmds, f"dtrain {mode} ({n} ranks, {path})", 600, hosts)


def run_memcpy(binary, sizes, seconds):
    """bytes -> GB/s of one thread's memcpy."""
    recs = run_ranks([[binary, "--mode=memcpy", f"--sizes_mib={sizes}",
                       f"--seconds={seconds / 4}"]], "memcpy", 600, Hosts(1))
    return {r["bytes"]: r["gbs"] for r in recs}


def run_gloo(script, n, sizes, seconds, hosts):
    port = free_ports(1)[0]
    cmds = [[TORCH_PYTHON, script, str(r), str(n), str(port), sizes, str(seconds),
             hosts.address(0)] for r in range(n)]
    return run_ranks(cmds, f"gloo ({n} ranks)", 600, hosts)


def run_iperf(seconds, hosts):
    """One TCP stream from the last host to the first (loopback with one host); returns GB/s
    received and CPU % (both ends)."""
    for attempt in range(20):
        port = free_ports(1)[0]
        server = subprocess.Popen(hosts.wrap(0, ["iperf3", "-s", "-1", "-p", str(port)]),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)  # no probe connection: the one-off server (-1) would take it as its client
        try:
            out = subprocess.run(hosts.wrap(hosts.count - 1, [
                "iperf3", "-c", hosts.address(0), "-p", str(port), "-t", str(seconds), "-J"]),
                capture_output=True, text=True, timeout=seconds + 60)
            end = json.loads(out.stdout).get("end", {})
            if "sum_received" in end:
                cpu = end["cpu_utilization_percent"]
                return {"gbs": end["sum_received"]["bits_per_second"] / 8e9,
                        "cpu_pct": cpu["host_total"] + cpu["remote_total"]}
        finally:
            server.kill()
            server.wait()
    raise SystemExit("bench_allreduce: iperf3 did not run")


def build(output_base, targets):
    """Builds the targets with -c opt; returns the path of each (by target)."""
    startup = [f"--output_base={output_base}"] if output_base else []
    # No convenience symlinks: bazel-bin stays the default build's for whoever shares the tree.
    cmd = ["bazel"] + startup + ["build", "-c", "opt", "--repo_env=DTRAIN_DISABLE_CUDA=1",
                                 "--symlink_prefix=/"]
    subprocess.run(cmd + targets, cwd=ROOT, check=True)
    bin_dir = subprocess.run(["bazel"] + startup + ["info", "-c", "opt", "bazel-bin"], cwd=ROOT,
                             check=True, capture_output=True, text=True).stdout.strip()
    return {t: os.path.join(bin_dir, t[2:].replace(":", "/")) for t in targets}


def make_certs(dtrain, tmp):
    """A fresh cluster CA and its certificates, as an operator makes them."""
    certs = os.path.join(tmp, "certs")
    subprocess.run([dtrain, "certs", "init", certs], check=True, capture_output=True, text=True)
    return certs


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--sizes_mib", default="1,2,4,8,16,32,64")
    ap.add_argument("--p2p_sizes_mib", default="1,16,64")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0, help="timed seconds per size and run")
    ap.add_argument("--benchmark", help="allreduce_benchmark binary (default: build it)")
    ap.add_argument("--bazel_output_base", help="bazel --output_base for the build")
    ap.add_argument("--skip_p2p", action="store_true")
    ap.add_argument("--paths", help="dtrain paths, comma-separated: job, plain, hier, shm, grpc, "
                    "grpc+tls, sockets (default: job; job,plain with --hosts 2)")
    ap.add_argument("--hosts", type=int, default=1,
                    help="2: two network namespaces joined by a veth pair (as root)")
    ap.add_argument("--tls", action="store_true",
                    help="also run grpc and grpc+tls in every round (TLS off/on tables)")
    ap.add_argument("--no_gloo", action="store_true", help="leave gloo out")
    ap.add_argument("--dtrain", help="dtrain CLI for `certs init` (default: build it)")
    args = ap.parse_args()
    if not args.no_gloo and not os.path.exists(TORCH_PYTHON):
        raise SystemExit("bench_allreduce: needs /usr/bin/python3 with python3-torch")
    if not args.skip_p2p and shutil.which("iperf3") is None:
        raise SystemExit("bench_allreduce: needs iperf3 (tools/setup.sh installs it)")
    paths = [p for p in (args.paths or ("job,plain" if args.hosts > 1 else "job")).split(",")
             if p]
    if args.hosts > 1 and "shm" in paths:
        raise SystemExit("bench_allreduce: --paths shm needs every rank on one host")
    if args.tls:
        paths += [p for p in ("grpc", "grpc+tls") if p not in paths]
    for p in paths:
        if p not in PATHS:
            raise SystemExit(f"bench_allreduce: --paths: unknown path '{p}' ({', '.join(PATHS)})")
    need_certs = any(PATHS[p][1] for p in paths)
    targets = ([] if args.benchmark else ["//worker/comm:allreduce_benchmark"]) + \
        (["//client:dtrain"] if need_certs and not args.dtrain else [])
    built = build(args.bazel_output_base, targets) if targets else {}
    binary = args.benchmark or built["//worker/comm:allreduce_benchmark"]
    sizes = [int(float(s) * (1 << 20)) // 4 * 4 for s in args.sizes_mib.split(",")]

    dtrain_cli = (args.dtrain or built["//client:dtrain"]) if need_certs else None
    with Hosts(args.hosts) as hosts:
        run(args, paths, binary, dtrain_cli, sizes, hosts)


def run(args, paths, binary, dtrain_cli, sizes, hosts):
    """The rounds (alternated), then the tables."""
    tmp = tempfile.mkdtemp(prefix="bench_allreduce_")
    tls_dir = make_certs(dtrain_cli, tmp) if dtrain_cli else None
    impls = paths + ([] if args.no_gloo else ["gloo"])
    memcpy = {}  # bytes -> [GB/s per round]
    gloo_script = os.path.join(tmp, "gloo_worker.py")
    with open(gloo_script, "w") as f:
        f.write(GLOO_WORKER)
    load0 = os.getloadavg()[0]

    # results[(impl, n, bytes)] = {"time_us": [...], "busbw": [...], "cpu_us": [...]}
    results = {}
    for n in [int(x) for x in args.ranks.split(",")]:
        for rnd in range(args.rounds):
            order = impls[rnd % len(impls):] + impls[:rnd % len(impls)]  # rotates per round
            for b, gbs in run_memcpy(binary, args.sizes_mib, args.seconds).items():
                memcpy.setdefault(b, []).append(gbs)
            for impl in order:
                if impl == "gloo":
                    recs = run_gloo(gloo_script, n, args.sizes_mib, args.seconds, hosts)
                else:
                    recs = run_dtrain(binary, n, args.sizes_mib, args.seconds, hosts, path=impl,
                                      tls_dir=tls_dir)
                for b in sizes:
                    mine = [r for r in recs if r["bytes"] == b]
                    r0 = [r for r in mine if r["rank"] == 0][0]
                    slot = results.setdefault((impl, n, b), {"time_us": [], "busbw": [],
                                                             "cpu_us": []})
                    slot["time_us"].append(r0["time_us"])
                    slot["busbw"].append(r0["busbw_gbs"])
                    slot["cpu_us"].append(sum(r["cpu_us"] for r in mine))
                print(f"  ranks={n} round {rnd + 1}/{args.rounds} {impl}: " +
                      " ".join(f"{b >> 20}MiB {results[(impl, n, b)]['busbw'][-1]:.3f}"
                               for b in sizes), file=sys.stderr, flush=True)

    p2p = {}  # p2p[(path, bytes)] = {"gbs": [...], "cpu_us": [...]}
    iperf = []
    if not args.skip_p2p:
        p2p_sizes = [int(float(s) * (1 << 20)) // 4 * 4 for s in args.p2p_sizes_mib.split(",")]
        for rnd in range(args.rounds):
            # iperf3 between the dtrain runs, its place rotating, as the all-reduce's peers.
            runs = paths + ["iperf3"]
            for what in runs[rnd % len(runs):] + runs[:rnd % len(runs)]:
                if what == "iperf3":
                    iperf.append(run_iperf(max(2, int(args.seconds * 2)), hosts))
                    continue
                recs = run_dtrain(binary, 2, args.p2p_sizes_mib, args.seconds, hosts, mode="p2p",
                                  path=what, tls_dir=tls_dir)
                for b in p2p_sizes:
                    recv = [r for r in recs if r["bytes"] == b and r["rank"] == 1][0]
                    cpu = sum(r["cpu_us"] for r in recs if r["bytes"] == b)
                    slot = p2p.setdefault((what, b), {"gbs": [], "cpu_us": []})
                    slot["gbs"].append(recv["gbs"])
                    slot["cpu_us"].append(cpu)
            print(f"  p2p round {rnd + 1}/{args.rounds}: " +
                  " ".join(f"{b >> 20}MiB " + "/".join(f"{p2p[(p, b)]['gbs'][-1]:.3f}"
                                                       for p in paths) for b in p2p_sizes) +
                  f" ({'/'.join(paths)}) iperf3 {iperf[-1]['gbs']:.3f} GB/s", file=sys.stderr,
                  flush=True)
    load1 = os.getloadavg()[0]

    print(f"\nload average {load0:.1f} -> {load1:.1f}")
    summary = {"allreduce": [], "p2p": [], "tls_allreduce": [], "tls_p2p": []}
    where = "one host" if hosts.count == 1 else f"{hosts.count} hosts (namespaces, veth)"
    for path in paths if not args.no_gloo else []:
        print_gloo_table(args, path, sizes, results, memcpy, summary, where)
    if args.tls:
        print_tls_tables(args, sizes, results, p2p, summary, "grpc", "grpc+tls", where)
    if "plain" in paths and "job" in paths:
        print_tls_tables(args, sizes, results, p2p, summary, "plain", "job", where)
    for path in paths if p2p else []:
        print_p2p_table(path, p2p, iperf, summary, where)
    summary["memcpy_gbs"] = {b: med(v) for b, v in memcpy.items()}
    summary["load"] = [load0, load1]
    print("BENCH_JSON " + json.dumps(summary))
    shutil.rmtree(tmp, ignore_errors=True)


def print_gloo_table(args, path, sizes, results, memcpy, summary, where):
    print(f"\nAll-reduce (sum, float32), {where}, dtrain path '{path}', median of "
          f"{args.rounds} rounds; memcpy: one thread, same run")
    print("| ranks | size | dtrain time (ms) | dtrain algbw | dtrain busbw | gloo time (ms) | "
          "gloo algbw | gloo busbw | busbw dtrain/gloo | memcpy GB/s | dtrain busbw / memcpy | "
          "CPU-s per all-reduce dtrain / gloo | busbw dtrain/gloo per round |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in [int(x) for x in args.ranks.split(",")]:
        for b in sizes:
            d, g = results[(path, n, b)], results[("gloo", n, b)]
            mc = med(memcpy.get(b, []))
            dt, gt = med(d["time_us"]), med(g["time_us"])
            dbus, gbus = med(d["busbw"]), med(g["busbw"])
            factor = 2 * (n - 1) / n
            print(f"| {n} | {b / (1 << 20):g} MiB | {dt / 1e3:.2f} | {dbus / factor:.3f} | "
                  f"{dbus:.3f} | {gt / 1e3:.2f} | {gbus / factor:.3f} | {gbus:.3f} | "
                  f"{dbus / gbus:.2f} | {mc:.2f} | {dbus / mc:.2f} | "
                  f"{med(d['cpu_us']) / 1e6:.3f} / {med(g['cpu_us']) / 1e6:.3f} | "
                  f"{' '.join(f'{x / y:.2f}' for x, y in zip(d['busbw'], g['busbw']))} |")
            summary["allreduce"].append({"ranks": n, "bytes": b, "path": path,
                                         "memcpy_gbs": mc, "dtrain_time_us": dt,
                                         "dtrain_busbw_gbs": dbus, "gloo_time_us": gt,
                                         "gloo_busbw_gbs": gbus, "ratio": dbus / gbus,
                                         "dtrain_cpu_us": med(d["cpu_us"]),
                                         "ratio_per_round": [x / y for x, y in
                                                             zip(d["busbw"], g["busbw"])],
                                         "gloo_cpu_us": med(g["cpu_us"])})


def print_tls_tables(args, sizes, results, p2p, summary, plain, tls, where):
    """Paths `plain` and `tls` side by side: what encryption costs on the same path."""
    print(f"\nAll-reduce with TLS off and on (dtrain paths '{plain}' and '{tls}', sum, float32), "
          f"{where}, median of {args.rounds} rounds")
    print("| ranks | size | busbw plaintext | busbw TLS | TLS / plaintext | "
          "CPU-s per all-reduce, plaintext / TLS |")
    print("|---|---|---|---|---|---|")
    for n in [int(x) for x in args.ranks.split(",")]:
        for b in sizes:
            d, t = results[(plain, n, b)], results[(tls, n, b)]
            dbus, tbus = med(d["busbw"]), med(t["busbw"])
            dcpu, tcpu = med(d["cpu_us"]), med(t["cpu_us"])
            print(f"| {n} | {b / (1 << 20):g} MiB | {dbus:.3f} | {tbus:.3f} | "
                  f"{tbus / dbus:.2f} | {dcpu / 1e6:.3f} / {tcpu / 1e6:.3f} |")
            summary["tls_allreduce"].append({"ranks": n, "bytes": b, "paths": [plain, tls],
                                             "busbw_gbs": dbus,
                                             "tls_busbw_gbs": tbus, "ratio": tbus / dbus,
                                             "cpu_us": dcpu, "tls_cpu_us": tcpu})
    if not p2p:
        return
    print(f"\nActivation stream with TLS off and on (paths '{plain}' and '{tls}', 2 ranks, two "
          f"sends in flight), {where}, median of {args.rounds} rounds")
    print("| size | plaintext GB/s | TLS GB/s | TLS / plaintext | "
          "CPU-s per GB, both ends: plaintext / TLS |")
    print("|---|---|---|---|---|")
    for (path, b), slot in p2p.items():
        if path != plain:
            continue
        on = p2p[(tls, b)]
        g, tg = med(slot["gbs"]), med(on["gbs"])
        cpu, tcpu = (med(x["cpu_us"]) / 1e6 / (b / 1e9) for x in (slot, on))
        print(f"| {b / (1 << 20):g} MiB | {g:.3f} | {tg:.3f} | {tg / g:.2f} | "
              f"{cpu:.2f} / {tcpu:.2f} |")
        summary["tls_p2p"].append({"bytes": b, "paths": [plain, tls], "gbs": g, "tls_gbs": tg, "ratio": tg / g,
                                   "cpu_s_per_gb": cpu, "tls_cpu_s_per_gb": tcpu})


def print_p2p_table(path, p2p, iperf, summary, where):
    ip = med([x["gbs"] for x in iperf])
    print(f"\nPoint-to-point activation stream ({where}, 2 ranks, two sends in flight, path "
          f"'{path}') vs iperf3 (one TCP stream, {ip:.3f} GB/s, CPU "
          f"{med([x['cpu_pct'] for x in iperf]):.0f}% of a core, both ends)")
    print("| size | dtrain GB/s | of iperf3 | CPU-s per GB, both ends |")
    print("|---|---|---|---|")
    for (p, b), slot in p2p.items():
        if p != path:
            continue
        g = med(slot["gbs"])
        cpu_per_gb = med(slot["cpu_us"]) / 1e6 / (b / 1e9)
        print(f"| {b / (1 << 20):g} MiB | {g:.3f} | {100 * g / ip:.0f}% | {cpu_per_gb:.2f} |")
        summary["p2p"].append({"path": path, "bytes": b, "gbs": g, "iperf3_gbs": ip,
                               "ratio": g / ip,
                               "cpu_s_per_gb": cpu_per_gb})


if __name__ == "__main__":
    main()
