#!/usr/bin/env python3
"""Runs a command and prints the largest RssAnon (memory the kernel cannot drop; file pages,
such as a mapped dataset's, not counted) its process reached, sampled every 20 ms.

    python3 tools/peak_anon_memory.py bazel-bin/worker/dtrain-local --data=big.bin ...

/usr/bin/time's maxrss (VmHWM) counts mapped file pages too, so it cannot tell a dataset read
into memory from one mapped. Standard library only.
"""
import subprocess
import sys
import time


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak_kb = 0
    while p.poll() is None:
        try:
            with open("/proc/%d/status" % p.pid) as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        peak_kb = max(peak_kb, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.02)
    print("exit %d, peak RssAnon %.0f MiB" % (p.returncode, peak_kb / 1024))


if __name__ == "__main__":
    main()
