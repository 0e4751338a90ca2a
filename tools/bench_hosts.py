"""Where tools/bench_allreduce.py runs its ranks: this machine's loopback (one host), or two
"hosts" on this machine (--hosts 2, as root): two network namespaces joined by a veth pair, so
traffic between them crosses a real network stack (TCP, IP, the veth driver) as between two
machines, though not a physical link.

Addresses come from 198.18.0.0/15, the range RFC 2544 reserves for benchmarks (never a private
range that a real network may use): host i is 198.18.0.(i+1)/24 on its end of the veth pair.
Each host's processes also get a /dev/shm of their own (a tmpfs mounted in the mount namespace
of `ip netns exec`), so dtrain's ranks share memory with the ranks of their own host only, as on
two machines: the transport's handshake finds the other host's rings missing and uses the
network. The namespaces, the veth pair and every process in them are removed at exit, also on
SIGINT / SIGTERM.

    with Hosts(2) as hosts:
        procs = [hosts.popen(h, cmds_of_host_h, tmpdir) for h in range(2)]
"""

import os
import shlex
import signal
import subprocess
import sys

NET = "198.18.0.{}"  # RFC 2544's benchmarking range (198.18.0.0/15)
PREFIX = 24


def _ip(*args):
    subprocess.run(["ip"] + list(args), check=True, capture_output=True, text=True)


class Hosts:
    """`count` hosts: 1 is this machine's loopback, 2 two namespaces and a veth pair."""

    def __init__(self, count):
        if count not in (1, 2):
            raise SystemExit(f"bench: --hosts {count}: 1 or 2 hosts")
        self.count = count
        tag = f"dtb{os.getpid()}"
        self.ns = [f"{tag}h{i}" for i in range(count)] if count > 1 else []
        self.devs = [f"{tag}v{i}" for i in range(count)] if count > 1 else []
        self.addresses = ([NET.format(i + 1) for i in range(count)] if count > 1
                          else ["127.0.0.1"])
        self._made = []

    def __enter__(self):
        if self.count == 1:
            return self
        if os.geteuid() != 0:
            raise SystemExit("bench: --hosts 2 makes network namespaces: run it as root")
        for sig in (signal.SIGINT, signal.SIGTERM):  # unwind through __exit__, which cleans up
            signal.signal(sig, lambda *_: sys.exit(130))
        try:
            for ns in self.ns:
                _ip("netns", "add", ns)
                self._made.append(ns)
            _ip("link", "add", self.devs[0], "netns", self.ns[0], "type", "veth", "peer", "name",
                self.devs[1], "netns", self.ns[1])
            for ns, dev, addr in zip(self.ns, self.devs, self.addresses):
                _ip("-n", ns, "addr", "add", f"{addr}/{PREFIX}", "dev", dev)
                _ip("-n", ns, "link", "set", dev, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except subprocess.CalledProcessError as e:
            self.__exit__(None, None, None)
            raise SystemExit(f"bench: making the namespaces: {' '.join(e.cmd)}: {e.stderr}")
        return self

    def __exit__(self, *exc):
        for ns in self._made:
            # Our processes still in it (a run that failed half-way), then the namespace: its
            # end of the veth pair goes with it, and the other end with it.
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self._made = []
        return False

    def host_of(self, rank, n):
        """Ranks in blocks: with 4 ranks on 2 hosts, ranks 0 and 1 on host 0, 2 and 3 on 1."""
        return rank * self.count // n

    def address(self, host):
        return self.addresses[host]

    def wrap(self, host, cmd):
        """`cmd` run on `host` (one process, e.g. iperf3)."""
        if self.count == 1:
            return cmd
        return ["ip", "netns", "exec", self.ns[host]] + cmd

    def popen(self, host, cmds, outdir):
        """Starts `cmds` on `host`, sharing one /dev/shm of that host's own; command i's output
        goes to outdir/out.<host>.<i> and outdir/err.<host>.<i>. Returns the Popen of the host
        (it exits once all of them did, with the first non-zero status)."""
        lines = []
        for i, cmd in enumerate(cmds):
            out = os.path.join(outdir, f"out.{host}.{i}")
            err = os.path.join(outdir, f"err.{host}.{i}")
            lines.append(f"{shlex.join(cmd)} >{shlex.quote(out)} 2>{shlex.quote(err)} & "
                         f"p{i}=$!")
        waits = " ".join(f"wait $p{i} || rc=$?;" for i in range(len(cmds)))
        script = "\n".join(lines) + f"\nrc=0; {waits} exit $rc"
        if self.count > 1:
            script = (f"mount -t tmpfs -o size=1g,mode=1777 dtrain-bench /dev/shm || exit 99\n"
                      f"export GLOO_SOCKET_IFNAME={self.devs[host]}\n" + script)
        # A session of its own: a failed run kills the whole group (os.killpg(p.pid, ...)).
        return subprocess.Popen(self.wrap(host, ["sh", "-c", script]), start_new_session=True)
