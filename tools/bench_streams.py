#!/usr/bin/env python3
"""Would several TLS streams per pair of ranks move more across hosts than one? The bound, measured
before building it: N pairs of dtrain processes stream at once across the two-namespace veth
(tools/bench_hosts.py), each pair its own mutual-TLS session (its own TCP connection, its own
record layer, its own threads), so their records are encrypted on as many cores as the machine
gives them; their receivers' GB/s summed is the most N streams inside one pair of ranks could
reach. Beside it, in every round and alternated: the same with plaintext streams, and iperf3
with -P N (N TCP streams) across the same veth.

    /usr/bin/python3 tools/bench_streams.py --benchmark BIN --dtrain CLI [--streams 1,2,4]
        [--size_mib 16] [--rounds 3] [--seconds 2]

As root (network namespaces). BIN: //worker/comm:allreduce_benchmark, CLI: //client:dtrain, both
`bazel build -c opt` (tools/bench_allreduce.py builds the same). Prints one line per run and a
table of medians, with the load average before and after.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_allreduce import free_ports, make_certs, run_ranks  # noqa: E402
from bench_hosts import Hosts  # noqa: E402


def run_pairs(binary, pairs, size_mib, seconds, hosts, tls_dir):
    """`pairs` dtrain p2p pairs at once, rank 0 of each on the first host, rank 1 on the
    second; returns the summed GB/s of the receivers and the CPU-s per GB of all processes."""
    senders, receivers = [], []
    for _ in range(pairs):
        p0, p1 = free_ports(2)
        peers = f"{hosts.address(0)}:{p0},{hosts.address(1)}:{p1}"
        for rank, out in ((0, senders), (1, receivers)):
            out.append([binary, f"--rank={rank}", f"--peers={peers}", "--mode=p2p",
                        f"--sizes_mib={size_mib}", f"--seconds={seconds}", "--path=grpc"] +
                       ([f"--tls_dir={tls_dir}"] if tls_dir else []))
    # run_ranks puts the first half of the commands on host 0, the second on host 1.
    recs = run_ranks(senders + receivers, f"{pairs} p2p pairs", 600, hosts)
    got = [r for r in recs if r["rank"] == 1]
    gbs = sum(r["gbs"] for r in got)
    cpu_s = sum(r["cpu_us"] for r in recs) / 1e6
    return {"gbs": gbs, "cpu_s": cpu_s}


def run_iperf(streams, seconds, hosts):
    port = free_ports(1)[0]
    server = subprocess.Popen(hosts.wrap(0, ["iperf3", "-s", "-1", "-p", str(port)]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)  # no probe: the one-off server (-1) would take it as its client
        out = subprocess.run(hosts.wrap(1, ["iperf3", "-c", hosts.address(0), "-p", str(port),
                                            "-t", str(seconds), "-P", str(streams), "-J"]),
                             capture_output=True, text=True, timeout=seconds + 60)
        return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"] / 8e9
    finally:
        server.kill()
        server.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--benchmark", required=True)
    ap.add_argument("--dtrain", required=True)
    ap.add_argument("--streams", default="1,2,4")
    ap.add_argument("--size_mib", default="16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    tls_dir = make_certs(args.dtrain, tempfile.mkdtemp(prefix="bench_streams_"))
    load0 = os.getloadavg()
    results = {}  # (what, n) -> [GB/s]
    with Hosts(2) as hosts:
        kinds = ["tls", "plain", "iperf3"]
        for rnd in range(args.rounds):
            order = kinds[rnd % 3:] + kinds[:rnd % 3]
            for n in streams:
                for what in order:
                    if what == "iperf3":
                        gbs = run_iperf(n, max(2, int(args.seconds * 2)), hosts)
                    else:
                        gbs = run_pairs(args.benchmark, n, args.size_mib, args.seconds, hosts,
                                        tls_dir if what == "tls" else None)["gbs"]
                    results.setdefault((what, n), []).append(gbs)
                    print(f"round {rnd + 1} {what} x{n}: {gbs:.3f} GB/s load "
                          f"{os.getloadavg()[0]:.1f}", flush=True)
    load1 = os.getloadavg()
    print(f"\nload average {load0[0]:.1f} -> {load1[0]:.1f}; {args.size_mib} MiB messages; "
          f"GB/s summed over the streams, median of {args.rounds} rounds")
    print("| streams | TLS | plaintext | iperf3 -P | TLS / iperf3 | TLS / plaintext |")
    print("|---|---|---|---|---|---|")
    for n in streams:
        t, p, i = (statistics.median(results[(k, n)]) for k in ("tls", "plain", "iperf3"))
        print(f"| {n} | {t:.3f} | {p:.3f} | {i:.3f} | {t / i:.2f} | {t / p:.2f} |")
    print("BENCH_JSON " + json.dumps({f"{k}x{n}": v for (k, n), v in results.items()}))


if __name__ == "__main__":
    main()
