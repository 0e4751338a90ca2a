"""Runs README.md's "Running the services yourself" block as written: a coordinator and two
workers with mutual TLS in the background, `dtrain workers`, the one-worker and the two-worker
example submitted and watched to SUCCEEDED, then the services stopped. Only what a test cannot
keep is changed: the `bazel build` line (Bazel built the binaries this test gets, placed where
the block expects them under bazel-bin/), and the fixed ports 7070 and 9464 (free ones instead,
the workers' offsets from them kept; $DTRAIN_COORDINATOR tells the CLI). Before the services stop, it also checks what the README
says of the roots: a spec naming the CA key or the coordinator's database by an absolute path is
refused at submit, and one naming the key by a relative path FAILS on the worker before reading.

Standard library only; run with Debian's python3 (tests/deploy/run_python.sh)."""
import argparse
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile

PARSER = argparse.ArgumentParser()
PARSER.add_argument("--readme", required=True)
PARSER.add_argument("--coordinator", required=True)
PARSER.add_argument("--worker", required=True)
PARSER.add_argument("--cli", required=True)
PARSER.add_argument("--tools", required=True, help="make_demo_data.sh beside demo_corpus.py")
PARSER.add_argument("--examples", required=True, help="deploy/examples")
ARGS = PARSER.parse_args()

SECTION = "## Running the services yourself"


def block(readme):
    """The first ```sh block of the section."""
    text = open(readme).read()
    start = text.index(SECTION)
    match = re.search(r"```sh\n(.*?)```", text[start:], re.S)
    if not match:
        sys.exit("no ```sh block under %r in %s" % (SECTION, readme))
    return match.group(1)


def free_block(width):
    """A base port whose `width` ports are free on loopback now (below the ephemeral range)."""
    for _ in range(200):
        base = random.randrange(10000, 30000)
        ok = True
        for port in range(base, base + width):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    sys.exit("no free ports")


# Checks run where the block stops the services (its `kill` line), with the CLI it set up.
HOSTILE = """
for secret in "$tls/ca.key" "$PWD/runs/local/coordinator.db"; do
  sed "s#data/demo.txt#$secret#" deploy/examples/tiny.json > runs/local/hostile.json
  if bazel-bin/client/dtrain submit runs/local/hostile.json 2>runs/local/hostile.err; then
    echo "readme_services_test: a spec naming $secret was accepted" >&2; exit 1
  fi
  grep -q "outside" runs/local/hostile.err || { cat runs/local/hostile.err >&2; exit 1; }
  echo "readme_services_test: refused at submit: $secret"
done
# A relative path resolves on the worker: the job fails there before anything is read.
sed "s#data/demo.txt#runs/local/tls/ca.key#" deploy/examples/tiny.json > runs/local/hostile.json
if bazel-bin/client/dtrain submit runs/local/hostile.json --watch >runs/local/hostile.out 2>&1; then
  echo "readme_services_test: a job reading runs/local/tls/ca.key succeeded" >&2; exit 1
fi
grep -q "FAILED.*outside this worker's allowed roots" runs/local/hostile.out ||
  { cat runs/local/hostile.out >&2; exit 1; }
echo "readme_services_test: FAILED before reading: runs/local/tls/ca.key"
"""


def main():
    script = block(ARGS.readme)
    lines = script.splitlines()
    if not lines[0].startswith("bazel build"):
        sys.exit("the block's first line is not its `bazel build`: %r" % lines[0])
    grpc, metrics = free_block(3), free_block(3)
    body = "\n".join(lines[1:])
    body = body.replace("7070", str(grpc)).replace("9464", str(metrics))
    kill = [l for l in body.splitlines() if l.startswith("kill ")]
    if len(kill) != 1:
        sys.exit("want one `kill` line in the block, found %d" % len(kill))
    body = body.replace(kill[0], HOSTILE + kill[0] + "\nwait\n")

    work = tempfile.mkdtemp(prefix="readme-services-")
    os.makedirs(os.path.join(work, "tools"))
    for name in ("make_demo_data.sh", "demo_corpus.py"):
        shutil.copy(os.path.join(ARGS.tools, name), os.path.join(work, "tools", name))
    shutil.copytree(ARGS.examples, os.path.join(work, "deploy", "examples"))
    for path, binary in (("coordinator/dtrain-coordinator", ARGS.coordinator),
                         ("worker/dtrain-worker", ARGS.worker), ("client/dtrain", ARGS.cli)):
        os.makedirs(os.path.dirname(os.path.join(work, "bazel-bin", path)), exist_ok=True)
        os.symlink(os.path.abspath(binary), os.path.join(work, "bazel-bin", path))
    # -e: any command of the block that fails fails the test; the trap stops the services then.
    script = ("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + body)
    with open(os.path.join(work, "block.sh"), "w") as f:
        f.write(script)
    env = dict(os.environ)
    for k in ("DTRAIN_TLS_CA", "DTRAIN_TLS_CERT", "DTRAIN_TLS_KEY", "DTRAIN_INSECURE"):
        env.pop(k, None)
    # The CLI's default coordinator is 127.0.0.1:7070, the block's port, which this test moved.
    env["DTRAIN_COORDINATOR"] = "127.0.0.1:%d" % grpc
    run = subprocess.run(["bash", "block.sh"], cwd=work, env=env, timeout=540,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(run.stdout[-6000:])
    if run.returncode != 0:
        for log in sorted(os.listdir(os.path.join(work, "runs", "local", "logs"))):
            with open(os.path.join(work, "runs", "local", "logs", log)) as f:
                print("----- %s (last 30 lines)\n%s" % (log, "".join(f.readlines()[-30:])))
        sys.exit("README block exited %d" % run.returncode)
    if len(re.findall(r"job-\d+ SUCCEEDED:", run.stdout)) != 2:
        sys.exit("want both examples SUCCEEDED: %s" % re.findall(r"job-\d+ \w+:", run.stdout))
    print("readme_services_test: the README block ran as written: 2 jobs SUCCEEDED, secrets "
          "refused")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
