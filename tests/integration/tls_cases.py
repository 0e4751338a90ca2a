"""Integration case: mutual TLS on every channel (common/tls.h), with the certificates of
`dtrain certs init`: daemons that refuse to start without TLS or --insecure, clients the
coordinator refuses (each told why in one line), plaintext and certificate-less connections
refused by the coordinator and by a worker's peer service, and a two-worker job over TLS.

Each case_* function is one Bazel test (listed in BUILD) and states what it checks.
"""

import os
import socket
import ssl
import subprocess
import urllib.request

from harness import Cluster, expect, free_port, small_job_spec, tls_flags

# What an HTTP/2 server sends first: a SETTINGS frame (type 4 in the 4th byte of its header).
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def first_bytes(address, tls_dir=None, cert=None, timeout=5):
    """What the server at `address` says to a client that sends the HTTP/2 preface: plaintext
    when tls_dir is None, else TLS trusting tls_dir/ca.pem with client certificate `cert` (None:
    none). b"" or the error's text when it refuses; the first bytes of its SETTINGS frame
    when it accepts. Python's ssl module: an oracle independent of gRPC and of dtrain."""
    host, port = address.rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=timeout)
    try:
        conn = raw
        if tls_dir is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False  # the server is the one judging here
            ctx.load_verify_locations(os.path.join(tls_dir, "ca.pem"))
            ctx.set_alpn_protocols(["h2"])
            if cert:
                ctx.load_cert_chain(os.path.join(tls_dir, cert + ".pem"),
                                    os.path.join(tls_dir, cert + ".key"))
            conn = ctx.wrap_socket(raw)
        conn.sendall(HTTP2_PREFACE + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        return conn.recv(9)
    except (ssl.SSLError, OSError) as e:
        return str(e)
    finally:
        raw.close()


def accepted(reply):
    return isinstance(reply, bytes) and len(reply) >= 4 and reply[3] == 4  # SETTINGS


def refused_in_one_line(what, rc, err, words):
    expect(rc == 3, "%s: exit %d, not 3:\n%s" % (what, rc, err))
    expect(len(err.strip().splitlines()) == 1, "%s: not one line:\n%s" % (what, err))
    for w in words:
        expect(w in err, "%s: the message does not say %r:\n%s" % (what, w, err))
    print("%s -> exit %d: %s" % (what, rc, err.strip()))


def listening(port):
    """Whether a TCP socket of this host listens on `port` (/proc/net/tcp and tcp6)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # LISTEN
                return True
    return False


def case_tls(args):
    """With mutual TLS: the coordinator and a worker started with neither TLS files nor
    --insecure exit 2 saying what to pass; the daemons export dtrain_*_tls_enabled 1; the CLI
    without a certificate (exit 2), with another cluster's CA, with a certificate of another
    CA, with an expired one and in plaintext is refused (exit 3, one line naming the reason),
    and so is a TLS CLI at a coordinator started with --insecure (which warns at start);
    a plaintext client and a TLS client without a certificate get nothing from the coordinator
    nor from a worker's peer port, while the worker certificate does; a dp=2 job trains to
    SUCCEEDED over TLS with the admin certificate, its tensors through TLS data connections in
    both directions (w2 has no shared memory, as a worker of another host, and its data
    listener on a fixed --data_port, listening while the job runs: both workers log
    `goes through tls sockets` for their peer, never the gRPC stream)."""
    with Cluster(args.binaries, "tls", tls=True) as c:
        d, cli = c.tls_dir, c.bin["cli"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("DTRAIN_")}

        # --- daemons with neither TLS files nor --insecure ---
        for name, argv in (
                ("coordinator", [c.bin["coordinator"], "--listen=127.0.0.1:%d" % free_port(),
                                 "--db=%s" % os.path.join(c.tmp, "refused.db"),
                                 "--metrics_listen="]),
                ("worker", [c.bin["worker"], "--worker_id=refused", "--coordinator=" + c.address,
                            "--device=cpu", "--metrics_listen=",
                            "--data_root=%s" % os.path.join(c.tmp, "refused")])):
            r = subprocess.run(argv, capture_output=True, timeout=30, env=env)
            err = r.stderr.decode(errors="replace")
            want = "the %s needs --tls_ca, --tls_cert and --tls_key (make them with `dtrain " \
                   "certs init DIR`), or --insecure" % name
            expect(r.returncode == 2 and want in err and len(err.strip().splitlines()) == 1,
                   "dtrain-%s without TLS flags: exit %d (want 2), %r" % (name, r.returncode, err))
            print("dtrain-%s without TLS flags -> exit 2: %s" % (name, err.strip()))

        # --- the cluster, and certificates it must refuse ---
        other = os.path.join(c.tmp, "other-cluster")
        for argv in ([cli, "certs", "init", other],
                     [cli, "certs", "issue", d, "old", "--role=admin", "--not_after=2020-01-01"]):
            r = subprocess.run(argv, capture_output=True, timeout=60)
            expect(r.returncode == 0, "%s: %s" % (" ".join(argv), r.stderr.decode()))
        c.write_corpus()
        c.start_coordinator()  # waits for `dtrain workers` with the admin certificate
        # Steps of at least 50 ms: the job runs through the probes of its ports below (150 steps
        # of this model take under a second on an idle machine, and its ports close with it).
        slow = "--test_only_step_delay=50ms"
        c.start_worker("w1", [slow])
        data_port = free_port()
        # As if on another host; its data connections' listener on a fixed port (--data_port).
        c.start_worker("w2", ["--shared_memory=false", "--data_port=%d" % data_port, slow])
        c.wait_workers({"w1": "IDLE", "w2": "IDLE"})
        for process, gauge in (("coordinator", "dtrain_coordinator_tls_enabled"),
                               ("worker-w1", "dtrain_worker_tls_enabled")):
            url = "http://127.0.0.1:%d/metrics" % c.metrics_ports[process]
            text = urllib.request.urlopen(url, timeout=10).read().decode()
            expect("\n%s 1\n" % gauge in text, "%s: no '%s 1'" % (process, gauge))

        # --- clients the coordinator refuses ---
        rc, _, err = c.cli("workers", cert=None)
        expect(rc == 2 and "dtrain: the CLI needs --tls_ca, --tls_cert and --tls_key" in err
               and len(err.strip().splitlines()) == 1, "no certificate: exit %d, %r" % (rc, err))
        print("no certificate -> exit %d: %s" % (rc, err.strip()))
        rc, _, err = c.cli("workers", *tls_flags(other, "admin"), cert=None)
        refused_in_one_line("another cluster's CA and certificate", rc, err,
                            ["the coordinator's certificate does not verify against --tls_ca"])
        flags = ["--tls_ca=%s" % os.path.join(d, "ca.pem")] + tls_flags(other, "admin")[1:]
        rc, _, err = c.cli("workers", *flags, cert=None)
        refused_in_one_line("a certificate of another CA", rc, err,
                            ["the coordinator refused our certificate",
                             "is not signed by the cluster CA"])
        rc, _, err = c.cli("workers", cert="old")
        refused_in_one_line("an expired certificate", rc, err,
                            ["the coordinator refused our certificate",
                             "expired on 2020-01-01"])
        rc, _, err = c.cli("workers", "--insecure", cert=None)
        refused_in_one_line("plaintext", rc, err,
                            ["requires mutual TLS and this client is plaintext"])
        # ... and the other way round: a TLS client to a coordinator started with --insecure.
        plain = "127.0.0.1:%d" % free_port()
        insecure = c._spawn("insecure-coordinator", [
            c.bin["coordinator"], "--listen=" + plain, "--insecure", "--metrics_listen=",
            "--db=%s" % os.path.join(c.tmp, "insecure.db")])
        c.wait_until(lambda: c.cli("workers", "--insecure", cert=None, coordinator=plain)[0] == 0,
                     30, "the --insecure coordinator answering", process=insecure)
        rc, _, err = c.cli("workers", coordinator=plain)
        refused_in_one_line("TLS to a plaintext coordinator", rc, err,
                            ["does not speak TLS", "started with --insecure? Then pass --insecure"])
        expect("WARNING: --insecure: every connection to %s is plaintext" % plain
               in insecure.log_text(), "the --insecure coordinator did not warn at start")
        insecure.stop()

        # --- a job over TLS; while it runs, who a worker's peer port lets in ---
        spec = small_job_spec(os.path.join(c.tmp, "ckpt"), 150, name="tls", parallel={"dp": 2})
        job_id = c.submit(c.write_spec("tls.json", spec))
        job = c.wait_step(job_id, 2, 120)
        peer = job["placement"]["ranks"][1]["worker_address"]
        for address, what in ((c.address, "the coordinator"), (peer, "rank 1's peer port")):
            plain, no_cert = first_bytes(address), first_bytes(address, d, None)
            expect(not accepted(plain), "%s answered a plaintext client: %r" % (what, plain))
            expect(not accepted(no_cert),
                   "%s answered a TLS client without a certificate: %r" % (what, no_cert))
            print("%s: plaintext -> %r; TLS without a certificate -> %r" % (what, plain, no_cert))
        with_cert = first_bytes(peer, d, "worker")
        expect(accepted(with_cert), "rank 1's peer port refused the worker certificate: %r"
               % (with_cert,))
        rc, _, err = c.cli("--coordinator=" + peer, "workers", "--insecure", cert=None)
        refused_in_one_line("the CLI in plaintext at rank 1's peer port", rc, err,
                            ["requires mutual TLS and this client is plaintext"])

        expect(listening(data_port), "w2's data listener is not on --data_port=%d" % data_port)
        rc, out, err = c.cli("watch", job_id, "--quiet", timeout=300)
        expect(rc == 0, "the job over TLS: exit %d\n%s\n%s" % (rc, out[-800:], err))
        for w in ("w1", "w2"):
            text = c.workers[w].log_text()
            expect("goes through tls sockets" in text and "goes through grpc" not in text,
                   "%s: its peer's data did not go through TLS data connections:\n%s"
                   % (w, "\n".join(l for l in text.splitlines() if "goes through" in l)))
        print("%s (dp=2 on w1 and w2) SUCCEEDED over mutual TLS, data through TLS data "
              "connections" % job_id)


def case_plaintext_peers(args):
    """Workers started with --plaintext_peers (and --shared_memory=false, so the tensors cross
    the peer streams) warn at start; their peer port answers a plaintext HTTP/2 client and not a
    TLS one, while the coordinator still refuses plaintext; a dp=2 job trains to SUCCEEDED."""
    with Cluster(args.binaries, "plaintext_peers", tls=True) as c:
        c.write_corpus()
        c.start_coordinator()
        flags = ["--plaintext_peers", "--shared_memory=false"]
        c.start_worker("w1", flags)
        c.start_worker("w2", flags)
        c.wait_workers({"w1": "IDLE", "w2": "IDLE"})
        spec = small_job_spec(os.path.join(c.tmp, "ckpt"), 150, name="plain", parallel={"dp": 2})
        job_id = c.submit(c.write_spec("plain.json", spec))
        job = c.wait_step(job_id, 2, 120)
        peer = job["placement"]["ranks"][1]["worker_address"]
        plain, tls = first_bytes(peer), first_bytes(peer, c.tls_dir, "worker")
        expect(accepted(plain), "rank 1's peer port refused a plaintext client: %r" % (plain,))
        expect(not accepted(tls), "rank 1's peer port answered TLS: %r" % (tls,))
        expect(not accepted(first_bytes(c.address)), "the coordinator answered plaintext")
        print("rank 1's peer port: plaintext -> %r; TLS -> %r" % (plain, tls))
        rc, out, err = c.cli("watch", job_id, "--quiet", timeout=300)
        expect(rc == 0, "the job with plaintext peers: exit %d\n%s\n%s" % (rc, out[-800:], err))
        for w in ("w1", "w2"):
            expect("WARNING: --plaintext_peers" in c.workers[w].log_text(),
                   "%s did not warn about --plaintext_peers" % w)
        print("%s (dp=2 on w1 and w2, peers in plaintext) SUCCEEDED" % job_id)
