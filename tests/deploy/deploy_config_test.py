"""Static checks of deploy/: every YAML and JSON file parses, and the pieces agree.

- docker-compose.yml: four workers with distinct --worker_id, each advertising its own service
  name, pointing at coordinator:7070, serving metrics on the port Prometheus scrapes, sharing
  the checkpoints volume and mounting the data; healthchecks; Grafana only under its profile;
  `docker-compose config` accepts it (with the GPU override too) when docker-compose is present.
- prometheus.yml scrapes exactly the compose services, on the metrics ports of their flags.
- Grafana: the provisioned datasource is the one the dashboards default to; panels have unique
  ids and every target uses the dashboard's datasource variable.
- k8s/*.yaml: every document has apiVersion, kind and metadata.name; the StatefulSet's
  serviceName is a headless Service; ports line up; workers request one GPU.
- systemd units: `systemd-analyze verify` (when present), on copies whose ExecStart points to a
  stub, since the binaries are not installed here.
- deploy/jobs/*.json: container paths, and `dtrain plan` accepts each.
- Every flag that compose, Kubernetes and systemd pass to dtrain-coordinator and dtrain-worker
  is one the binary has (its --helpfull), so a renamed flag fails here, not at a deployment.
- The image's build stage installs tools/setup.sh's build packages (CI builds the image from
  binaries it made, so nothing else would see the two lists drift apart).
- TLS everywhere: no file starts a daemon or the CLI with --insecure; every daemon gets
  --tls_ca/--tls_cert/--tls_key naming its own role's files (coordinator.pem, worker.pem), inside
  a read-only mount of that role's certificates: compose's volume tls-ROLE, which the one-shot
  `certs` service fills (`dtrain certs init`) and the daemons wait for, on a directory the image
  creates for uid 10001; Kubernetes' Secret dtrain-tls-ROLE, whose `kubectl create secret`
  deploy/README.md shows; systemd's /etc/dtrain/tls. The compose CLI uses the admin certificate.
Runs with Debian's python3 and PyYAML, from Bazel's runfiles (cwd) or the workspace.
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

ARGS = None
DEPLOY = None


def load_yaml_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


# The workers' --allowed_paths in compose and Kubernetes: the two mounted volumes, datasets and
# checkpoints, where deploy/jobs' paths lie.
ALLOWED_PATHS = "/var/lib/dtrain/data,/var/lib/dtrain/checkpoints"


def flags(command):
    """--name=value flags of a compose command list."""
    out = {}
    for arg in command:
        m = re.match(r"--([a-z_]+)=(.*)", str(arg))
        if m:
            out[m.group(1)] = m.group(2)
    return out


def read(*parts):
    with open(os.path.join(DEPLOY, *parts)) as f:
        return f.read()


def coordinator_names(test, hosts):
    """The DNS names and IPs in the coordinator certificate that `dtrain certs init DIR
    --host=H...` makes (the real CLI, read back with openssl); skips the test without them."""
    if not ARGS.cli or not shutil.which("openssl"):
        test.skipTest("no --cli or no openssl")
    tls = os.path.join(tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR")), "tls")
    r = subprocess.run([ARGS.cli, "certs", "init", tls] + [f"--host={h}" for h in hosts],
                       capture_output=True, text=True)  # the last --host wins
    test.assertEqual(r.returncode, 0, r.stdout + r.stderr)
    r = subprocess.run(["openssl", "x509", "-in", os.path.join(tls, "coordinator.pem"), "-noout",
                        "-ext", "subjectAltName"], capture_output=True, text=True)
    test.assertEqual(r.returncode, 0, r.stderr)
    return set(re.findall(r"(?:DNS|IP Address):([^,\s]+)", r.stdout))


class TlsFlagsMixin:
    def assert_tls_files(self, where, f, role, directory):
        """f: a daemon's flags; its TLS files are ROLE's, in DIRECTORY."""
        self.assertNotIn("insecure", f, where)
        self.assertEqual(
            (f.get("tls_ca"), f.get("tls_cert"), f.get("tls_key")),
            (f"{directory}/ca.pem", f"{directory}/{role}.pem", f"{directory}/{role}.key"), where)


class ComposeTest(unittest.TestCase, TlsFlagsMixin):
    @classmethod
    def setUpClass(cls):
        (cls.compose,) = load_yaml_all(os.path.join(DEPLOY, "docker-compose.yml"))
        (cls.gpu,) = load_yaml_all(os.path.join(DEPLOY, "docker-compose.gpu.yml"))
        cls.services = cls.compose["services"]
        cls.workers = {n: s for n, s in cls.services.items() if n.startswith("worker")}

    def test_services(self):
        self.assertEqual(
            set(self.services),
            {"certs", "coordinator", "worker1", "worker2", "worker3", "worker4", "cli",
             "prometheus", "grafana"})
        self.assertEqual(self.services["grafana"].get("profiles"), ["grafana"])
        self.assertEqual(self.services["cli"].get("profiles"), ["cli"])
        for name in ("coordinator", "prometheus"):
            self.assertNotIn("profiles", self.services[name])

    def test_coordinator(self):
        c = self.services["coordinator"]
        f = flags(c["command"])
        self.assertEqual(c["command"][0], "dtrain-coordinator")
        self.assertEqual(f["listen"], "0.0.0.0:7070")
        self.assertEqual(f["metrics_listen"], "0.0.0.0:9464")
        db_dir = os.path.dirname(f["db"])
        self.assertTrue(any(v.endswith(":" + db_dir) for v in c["volumes"]), c["volumes"])
        self.assertEqual(c["healthcheck"]["test"], ["CMD", "dtrain-healthcheck", "9464"])
        self.assertEqual(c["build"]["dockerfile"], "deploy/docker/Dockerfile")

    def test_workers(self):
        self.assertEqual(len(self.workers), 4)
        ids = set()
        for name, w in self.workers.items():
            f = flags(w["command"])
            self.assertEqual(w["command"][0], "dtrain-worker")
            ids.add(f["worker_id"])
            self.assertEqual(f["advertise_address"], f"{name}:7071", name)
            self.assertEqual(f["coordinator"], "coordinator:7070", name)
            self.assertEqual(f["metrics_listen"], "0.0.0.0:9465", name)
            self.assertEqual(w["healthcheck"]["test"], ["CMD", "dtrain-healthcheck", "9465"])
            self.assertEqual(w["depends_on"]["coordinator"]["condition"], "service_healthy")
            mounts = {v.split(":")[-2] if v.endswith(":ro") else v.split(":")[-1]: v
                      for v in w["volumes"]}
            self.assertIn("/var/lib/dtrain/checkpoints", mounts, name)
            self.assertTrue(mounts["/var/lib/dtrain/checkpoints"].startswith("checkpoints:"))
            self.assertIn("/var/lib/dtrain/data", mounts, name)
            # One /dev/shm for the workers of the host: same-host ranks use shared memory.
            self.assertTrue(mounts["/dev/shm"].startswith("worker-shm:"), name)
            self.assertTrue(f["data_root"].startswith("/var/lib/dtrain/checkpoints/"), name)
            self.assertEqual(f["allowed_paths"], ALLOWED_PATHS, name)
            self.assertEqual(w["image"], self.services["coordinator"]["image"])
            self.assertEqual(w["environment"]["GOMP_SPINCOUNT"], "2000", name)
            self.assertNotIn("OMP_WAIT_POLICY", w["environment"], name)
        self.assertEqual(len(ids), 4, "worker ids must be distinct")

    def mounts(self, service):
        """mount path -> (source, read_only) of a compose service's volumes."""
        out = {}
        for v in service["volumes"]:
            parts = v.split(":")
            out[parts[1]] = (parts[0], parts[2:] == ["ro"])
        return out

    def test_tls(self):
        certs = self.services["certs"]
        script = "\n".join(certs["command"]).replace("$$", "$")  # compose's escape of $
        self.assertIn('dtrain certs init /var/lib/dtrain/tls-ca --host="$DTRAIN_TLS_HOSTS"',
                      script)
        self.assertNotIn("restart", certs)
        certs_mounts = self.mounts(certs)
        self.assertEqual(certs_mounts["/var/lib/dtrain/tls-ca"], ("tls-ca", False))
        daemons = [("coordinator", "coordinator")] + [(n, "worker") for n in self.workers]
        for name, role in daemons:
            s = self.services[name]
            self.assert_tls_files(name, flags(s["command"]), role, "/var/lib/dtrain/tls")
            self.assertEqual(self.mounts(s)["/var/lib/dtrain/tls"], (f"tls-{role}", True), name)
            self.assertEqual(s["depends_on"]["certs"]["condition"],
                             "service_completed_successfully", name)
        cli = self.services["cli"]
        env = cli["environment"]
        self.assertEqual(
            (env["DTRAIN_TLS_CA"], env["DTRAIN_TLS_CERT"], env["DTRAIN_TLS_KEY"]),
            ("/var/lib/dtrain/tls/ca.pem", "/var/lib/dtrain/tls/admin.pem",
             "/var/lib/dtrain/tls/admin.key"))
        self.assertEqual(self.mounts(cli)["/var/lib/dtrain/tls"], ("tls-admin", True))
        # certs fills each role's volume (mounted where its script copies to), on directories
        # the image makes for uid 10001: a fresh named volume takes their owner.
        for role in ("coordinator", "worker", "admin"):
            path = f"/var/lib/dtrain/tls-{role}"
            self.assertEqual(certs_mounts[path], (f"tls-{role}", False))
            self.assertIn(role, re.search(r"for role in ([a-z ]+);", script).group(1).split())
        for path in list(certs_mounts) + ["/var/lib/dtrain/tls"]:
            for name in ("Dockerfile", "Dockerfile.cuda"):
                self.assertRegex(read("docker", name), re.escape(path) + r"[ \n]", name)
        self.assertIn("DTRAIN_TLS_HOSTS", script)
        for name, w in self.gpu["services"].items():
            if name.startswith("worker"):
                self.assert_tls_files(f"gpu {name}", flags(w["command"]), "worker",
                                      "/var/lib/dtrain/tls")

    def test_coordinator_certificate_names_what_the_others_dial(self):
        names = coordinator_names(self, [""])  # the certs service's: DTRAIN_TLS_HOSTS empty
        dialled = {flags(w["command"])["coordinator"] for w in self.workers.values()}
        dialled.add(self.services["cli"]["environment"]["DTRAIN_COORDINATOR"])
        for address in dialled:
            self.assertIn(address.rsplit(":", 1)[0], names)
        self.assertIn("127.0.0.1", names)  # the published port, for a CLI on the host

    def test_gpu_override(self):
        for name, w in self.gpu["services"].items():
            if not name.startswith("worker"):
                continue
            f = flags(w["command"])
            base = flags(self.workers[name]["command"])
            self.assertEqual(f["worker_id"], base["worker_id"])
            self.assertEqual(f["advertise_address"], base["advertise_address"])
            self.assertTrue(f["device"].startswith("cuda"))
            self.assertEqual(f["allowed_paths"], ALLOWED_PATHS, name)
            devices = w["deploy"]["resources"]["reservations"]["devices"]
            self.assertEqual(devices[0]["capabilities"], ["gpu"])
        ids = [w["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"][0]
               for n, w in self.gpu["services"].items() if n.startswith("worker")]
        self.assertEqual(sorted(ids), ["0", "1", "2", "3"])
        self.assertEqual(self.gpu["services"]["coordinator"]["build"]["dockerfile"],
                         "deploy/docker/Dockerfile.cuda")

    def test_prometheus_scrapes_the_compose_services(self):
        (prom,) = load_yaml_all(os.path.join(DEPLOY, "prometheus", "prometheus.yml"))
        jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
        targets = lambda j: sorted(t for sc in jobs[j]["static_configs"] for t in sc["targets"])
        self.assertEqual(targets("dtrain-coordinator"), ["coordinator:9464"])
        self.assertEqual(
            targets("dtrain-worker"),
            sorted(f"{n}:{flags(w['command'])['metrics_listen'].rsplit(':', 1)[1]}"
                   for n, w in self.workers.items()))
        self.assertEqual(prom["rule_files"], ["alerts.yml"])

    def test_docker_compose_config(self):
        exe = shutil.which("docker-compose")
        if exe is None:
            self.skipTest("no docker-compose")
        env = dict(os.environ, DTRAIN_DATA_DIR="/tmp")
        for files in (["docker-compose.yml"], ["docker-compose.yml", "docker-compose.gpu.yml"]):
            args = [exe, "--ansi", "never"]
            for f in files:
                args += ["-f", os.path.join(DEPLOY, f)]
            r = subprocess.run(args + ["config", "-q"], capture_output=True, text=True, env=env)
            self.assertEqual(r.returncode, 0, f"docker-compose config {files}: {r.stderr}")


def binary_flags(path):
    """Names of the flags an absl binary accepts, from its --helpfull ("  --name (text)")."""
    r = subprocess.run([path, "--helpfull"], capture_output=True, text=True, timeout=60)
    names = set(re.findall(r"^\s+--([a-z0-9_]+) \(", r.stdout + r.stderr, re.M))
    assert names, f"{path} --helpfull listed no flags: {r.stdout}{r.stderr}"
    return names


def daemon_commands():
    """(where, binary, [args]) of every dtrain-coordinator and dtrain-worker deploy/ starts."""
    out = []
    for name in ("docker-compose.yml", "docker-compose.gpu.yml"):
        (compose,) = load_yaml_all(os.path.join(DEPLOY, name))
        for service, s in compose["services"].items():
            command = s.get("command")
            if command and str(command[0]).startswith("dtrain-"):
                out.append((f"{name} {service}", command[0], [str(a) for a in command[1:]]))
    for path in sorted(glob.glob(os.path.join(DEPLOY, "k8s", "*.yaml"))):
        for d in load_yaml_all(path):
            pod = d.get("spec", {}).get("template", {}).get("spec", {})
            for c in pod.get("containers", []):
                if c.get("command", [""])[0].startswith("dtrain-"):
                    out.append((f"k8s/{os.path.basename(path)} {c['name']}", c["command"][0],
                                [str(a) for a in c.get("args", [])]))
    # systemd: ExecStart (continuation lines joined), and the extra flags of the env files and
    # of the units' Environment= defaults (DTRAIN_COORDINATOR_FLAGS, DTRAIN_WORKER_FLAGS).
    extra = {"coordinator": [], "worker": []}
    for path in sorted(glob.glob(os.path.join(DEPLOY, "systemd", "*"))):
        with open(path) as f:
            text = f.read().replace("\\\n", " ")
        for binary, role in (("dtrain-coordinator", "coordinator"), ("dtrain-worker", "worker")):
            for m in re.finditer(r"^ExecStart=/usr/local/bin/" + binary + r" (.*)$", text, re.M):
                args = [a for a in m.group(1).split() if not a.startswith("$DTRAIN_")]
                out.append((f"systemd/{os.path.basename(path)}", binary, args))
            for m in re.finditer(r"DTRAIN_" + role.upper() + r"_FLAGS=(.*)$", text, re.M):
                extra[role] += m.group(1).split()
    for role, args in extra.items():
        out.append((f"systemd DTRAIN_{role.upper()}_FLAGS", f"dtrain-{role}", args))
    return out


class FlagsTest(unittest.TestCase):
    def test_flags_exist_on_the_binaries(self):
        binaries = {"dtrain-coordinator": ARGS.coordinator, "dtrain-worker": ARGS.worker}
        if not all(binaries.values()):
            self.skipTest("--coordinator and --worker (the binaries) not given")
        known = {name: binary_flags(path) for name, path in binaries.items()}
        commands = daemon_commands()
        self.assertGreaterEqual(len(commands), 12)  # compose 5 + 5, k8s 2, systemd 2 (+ extras)
        for where, binary, args in commands:
            for arg in args:
                m = re.match(r"--([a-z0-9_]+)", arg)
                self.assertTrue(m, f"{where}: {arg!r} is not a --flag")
                self.assertIn(m.group(1), known[binary], f"{where}: {binary} has no --{m.group(1)}")


class GrafanaTest(unittest.TestCase):
    def test_provisioning(self):
        (ds,) = load_yaml_all(os.path.join(DEPLOY, "grafana", "provisioning", "datasources",
                                           "prometheus.yml"))
        (source,) = ds["datasources"]
        self.assertEqual(source["type"], "prometheus")
        self.assertEqual(source["url"], "http://prometheus:9090")
        (dp,) = load_yaml_all(os.path.join(DEPLOY, "grafana", "provisioning", "dashboards",
                                           "dtrain.yml"))
        (compose,) = load_yaml_all(os.path.join(DEPLOY, "docker-compose.yml"))
        mounts = compose["services"]["grafana"]["volumes"]
        path = dp["providers"][0]["options"]["path"]
        self.assertIn(f"./grafana/dashboards:{path}:ro", mounts)
        self.assertIn("./grafana/provisioning:/etc/grafana/provisioning:ro", mounts)

    def test_dashboards(self):
        (ds,) = load_yaml_all(os.path.join(DEPLOY, "grafana", "provisioning", "datasources",
                                           "prometheus.yml"))
        uid = ds["datasources"][0]["uid"]
        boards = sorted(glob.glob(os.path.join(DEPLOY, "grafana", "dashboards", "*.json")))
        self.assertEqual([os.path.basename(b) for b in boards], ["cluster.json", "job.json"])
        uids = set()
        for path in boards:
            with open(path) as f:
                board = json.load(f)
            name = os.path.basename(path)
            uids.add(board["uid"])
            variables = {v["name"]: v for v in board["templating"]["list"]}
            self.assertEqual(variables["datasource"]["type"], "datasource")
            self.assertEqual(variables["datasource"]["current"]["value"], uid)
            ids = [p["id"] for p in board["panels"]]
            self.assertEqual(len(ids), len(set(ids)), f"{name}: duplicate panel ids")
            for p in board["panels"]:
                if p["type"] == "row":
                    continue
                self.assertTrue(p.get("targets"), f"{name}: {p['title']} has no query")
                self.assertEqual(p["datasource"]["uid"], "${datasource}", p["title"])
                for t in p["targets"]:
                    self.assertEqual(t["datasource"]["uid"], "${datasource}", p["title"])
                g = p["gridPos"]
                self.assertLessEqual(g["x"] + g["w"], 24, p["title"])
            if name == "job.json":
                self.assertIn("job_id", variables)
                for p in board["panels"]:
                    for t in p.get("targets", []):
                        if "dtrain_worker_" in t["expr"] and "device_memory" not in t["expr"]:
                            self.assertIn('job_id="$job_id"', t["expr"], p["title"])
        self.assertEqual(len(uids), 2)


class KubernetesTest(unittest.TestCase, TlsFlagsMixin):
    @classmethod
    def setUpClass(cls):
        cls.docs = []
        for path in sorted(glob.glob(os.path.join(DEPLOY, "k8s", "*.yaml"))):
            for d in load_yaml_all(path):
                cls.docs.append((os.path.basename(path), d))
        cls.by_kind = {}
        for f, d in cls.docs:
            cls.by_kind.setdefault(d["kind"], {})[d.get("metadata", {}).get("name", f)] = d

    def test_documents(self):
        self.assertGreaterEqual(len(self.docs), 10)
        for f, d in self.docs:
            self.assertIn("apiVersion", d, f)
            self.assertIn("kind", d, f)
            if d["kind"] != "Kustomization":
                self.assertIn("name", d["metadata"], f)
        (kust,) = [d for f, d in self.docs if d["kind"] == "Kustomization"]
        files = {os.path.basename(p) for p in glob.glob(os.path.join(DEPLOY, "k8s", "*.yaml"))}
        self.assertEqual(set(kust["resources"]) | {"kustomization.yaml"}, files)

    def test_workers(self):
        sts = self.by_kind["StatefulSet"]["dtrain-worker"]
        svc = self.by_kind["Service"][sts["spec"]["serviceName"]]
        self.assertEqual(svc["spec"]["clusterIP"], "None")
        pod = sts["spec"]["template"]
        self.assertEqual(svc["spec"]["selector"], sts["spec"]["selector"]["matchLabels"])
        (c,) = pod["spec"]["containers"]
        f = flags(c["args"])
        self.assertEqual(f["worker_id"], "$(POD_NAME)")
        self.assertEqual(
            f["advertise_address"],
            f"$(POD_NAME).{svc['metadata']['name']}.$(POD_NAMESPACE).svc.cluster.local:7071")
        env = {e["name"] for e in c["env"]}
        self.assertTrue({"POD_NAME", "POD_NAMESPACE"} <= env)
        self.assertIn({"name": "GOMP_SPINCOUNT", "value": "2000"}, c["env"])
        self.assertNotIn("OMP_WAIT_POLICY", env)
        self.assertEqual(c["resources"]["limits"]["nvidia.com/gpu"], 1)
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        self.assertEqual(ports, {"peer": 7071, "metrics": 9465})
        self.assertEqual(f["metrics_listen"], "0.0.0.0:9465")
        self.assertEqual(pod["metadata"]["annotations"]["prometheus.io/port"], "9465")
        # $(VAR) must name a variable of the container (env or the ConfigMap).
        config = self.by_kind["ConfigMap"]["dtrain-flags"]["data"]
        for arg in c["args"]:
            for var in re.findall(r"\$\(([A-Z_]+)\)", arg):
                self.assertTrue(var in env or var in config, f"{arg}: {var} undefined")
        mounts = {m["mountPath"] for m in c["volumeMounts"]}
        self.assertIn("/var/lib/dtrain/checkpoints", mounts)
        # The node's /dev/shm, shared by the workers of the node (same-host data path).
        shm = [m["name"] for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        self.assertEqual(len(shm), 1)
        (vol,) = [v for v in pod["spec"]["volumes"] if v["name"] == shm[0]]
        self.assertEqual(vol["hostPath"]["path"], "/dev/shm")
        self.assertEqual(f["allowed_paths"], ALLOWED_PATHS)
        self.assertTrue(set(ALLOWED_PATHS.split(",")) <= mounts)
        claim = [v for v in pod["spec"]["volumes"] if v["name"] == "checkpoints"][0]
        pvc = self.by_kind["PersistentVolumeClaim"][claim["persistentVolumeClaim"]["claimName"]]
        self.assertEqual(pvc["spec"]["accessModes"], ["ReadWriteMany"])

    def test_coordinator(self):
        dep = self.by_kind["Deployment"]["dtrain-coordinator"]
        svc = self.by_kind["Service"]["dtrain-coordinator"]
        self.assertEqual(dep["spec"]["replicas"], 1)
        self.assertEqual(dep["spec"]["strategy"]["type"], "Recreate")
        ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
        self.assertEqual(ports, {"grpc": 7070, "metrics": 9464})
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        f = flags(c["args"])
        self.assertEqual(f["listen"], "0.0.0.0:7070")
        self.assertEqual(f["metrics_listen"], "0.0.0.0:9464")
        config = self.by_kind["ConfigMap"]["dtrain-flags"]["data"]
        self.assertEqual(config["DTRAIN_COORDINATOR"],
                         "dtrain-coordinator.dtrain.svc.cluster.local:7070")

    def test_tls(self):
        readme = read("README.md").replace("\\\n", " ")  # joins continued lines
        pods = [(self.by_kind["Deployment"]["dtrain-coordinator"], "coordinator"),
                (self.by_kind["StatefulSet"]["dtrain-worker"], "worker")]
        for obj, role in pods:
            pod = obj["spec"]["template"]["spec"]
            (c,) = pod["containers"]
            (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/var/lib/dtrain/tls"]
            self.assertTrue(mount.get("readOnly"), role)
            (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
            secret = volume["secret"]["secretName"]
            self.assertEqual(secret, f"dtrain-tls-{role}")
            # Readable by the pod's fsGroup, the user the daemon runs as, and no one else.
            self.assertEqual(volume["secret"]["defaultMode"], 0o440, role)
            self.assertEqual(pod["securityContext"]["fsGroup"],
                             pod["securityContext"]["runAsGroup"])
            self.assert_tls_files(role, flags(c["args"]), role, "/var/lib/dtrain/tls")
            # The README makes the Secret with exactly the keys the flags name.
            m = re.search(r"kubectl -n dtrain create secret generic " + secret + r" ([^\n]+)",
                          readme)
            self.assertTrue(m, f"deploy/README.md does not make the Secret {secret}")
            self.assertEqual(sorted(re.findall(r"--from-file=\S*?([a-z]+\.(?:pem|key))\b",
                                               m.group(1))),
                             sorted(["ca.pem", f"{role}.pem", f"{role}.key"]), m.group(0))
        # The coordinator's certificate, made as the README says, names the address the
        # workers dial, and 127.0.0.1 (kubectl port-forward).
        kubernetes = readme[readme.index("## Kubernetes"):]
        init = re.search(r"dtrain certs init tls ([^\n]*)", kubernetes).group(1)
        names = coordinator_names(self, re.findall(r"--host=(\S+)", init)[-1:])
        host = self.by_kind["ConfigMap"]["dtrain-flags"]["data"]["DTRAIN_COORDINATOR"]
        self.assertIn(host.rsplit(":", 1)[0], names)
        self.assertIn("127.0.0.1", names)

    def test_service_monitors(self):
        sm = self.by_kind["ServiceMonitor"]
        for name, m in sm.items():
            svc = self.by_kind["Service"][name]
            self.assertEqual(m["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
                             svc["metadata"]["labels"]["app.kubernetes.io/name"])
            self.assertIn(m["spec"]["endpoints"][0]["port"],
                          [p["name"] for p in svc["spec"]["ports"]])


class SystemdTest(unittest.TestCase):
    def test_tls(self):
        for unit, role in (("dtrain-coordinator.service", "coordinator"),
                           ("dtrain-worker@.service", "worker")):
            text = read("systemd", unit)
            start = re.search(r"^ExecStart=(.*?)[^\\]$", text, re.M | re.S).group(0)
            start = start.replace("\\\n", " ")
            for name, file in (("ca", "ca.pem"), ("cert", f"{role}.pem"), ("key", f"{role}.key")):
                var = f"DTRAIN_TLS_{name.upper()}"
                self.assertIn(f"--tls_{name}=${{{var}}}", start, unit)
                self.assertIn(f"Environment={var}=/etc/dtrain/tls/{file}\n", text, unit)

    def test_verify(self):
        exe = shutil.which("systemd-analyze")
        if exe is None:
            self.skipTest("no systemd-analyze")
        tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        stub = os.path.join(tmp, "stub")
        with open(stub, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(stub, 0o755)
        units = []
        for name, as_name in (("dtrain-coordinator.service", "dtrain-coordinator.service"),
                              ("dtrain-worker@.service", "dtrain-worker@gpu0.service")):
            with open(os.path.join(DEPLOY, "systemd", name)) as f:
                text = f.read()
            self.assertIn("Restart=on-failure", text)
            self.assertIn("EnvironmentFile=", text)
            text = re.sub(r"/usr/local/bin/dtrain-(coordinator|worker)", stub, text)
            units.append(os.path.join(tmp, as_name))
            with open(units[-1], "w") as f:
                f.write(text)
        r = subprocess.run([exe, "verify"] + units, capture_output=True, text=True)
        out = (r.stdout + r.stderr).strip()
        self.assertEqual((r.returncode, out), (0, ""), out)

    def test_worker_openmp_threads_spin_briefly_then_sleep(self):
        # docs/PERFORMANCE.md, "OpenMP's wait": a short spin, neither PASSIVE nor libgomp's long
        # default.
        unit = read("systemd", "dtrain-worker@.service")
        self.assertIn("Environment=GOMP_SPINCOUNT=2000\n", unit)
        self.assertNotIn("OMP_WAIT_POLICY", unit)

    def test_env_files(self):
        for path in glob.glob(os.path.join(DEPLOY, "systemd", "*.env")):
            with open(path) as f:
                for line in f:
                    line = line.strip()
                    if line and not line.startswith("#"):
                        self.assertRegex(line, r"^[A-Z_]+=\S", path)


class NoInsecureTest(unittest.TestCase):
    def test_no_file_runs_without_tls(self):
        for path in glob.glob(os.path.join(DEPLOY, "**", "*"), recursive=True):
            if os.path.isfile(path) and not path.endswith(".md"):
                with open(path, errors="replace") as f:
                    text = f.read()
                for word in ("--insecure", "DTRAIN_INSECURE"):
                    self.assertNotIn(word, text, os.path.relpath(path, DEPLOY))


class JobSpecsTest(unittest.TestCase):
    def test_specs(self):
        specs = sorted(glob.glob(os.path.join(DEPLOY, "jobs", "*.json")))
        self.assertIn("smoke-pp2-tp2.json", [os.path.basename(s) for s in specs])
        for path in specs:
            with open(path) as f:
                spec = json.load(f)
            self.assertTrue(spec["dataset"].startswith("/var/lib/dtrain/data/"), path)
            # Inside the workers' --allowed_paths, or the coordinator refuses it at submit.
            for field in (spec["dataset"], spec.get("checkpoint", {}).get("dir", "")):
                self.assertTrue(not field or any(field.startswith(root + "/")
                                                 for root in ALLOWED_PATHS.split(",")), path)
            par = spec.get("parallel", {})
            if par.get("dp", 1) * par.get("pp", 1) * par.get("tp", 1) > 1:
                self.assertTrue(
                    spec["checkpoint"]["dir"].startswith("/var/lib/dtrain/checkpoints/"), path)
            if ARGS.cli:
                r = subprocess.run([ARGS.cli, "plan", path, "--hosts=1"], capture_output=True,
                                   text=True)
                self.assertEqual(r.returncode, 0, f"dtrain plan {path}: {r.stdout}{r.stderr}")


# tools/setup.sh's packages that building the image's binaries does not need: tests,
# benchmarks, fuzzing, docker, the browser. libssl-dev comes with libgrpc++-dev.
NOT_FOR_THE_BUILD = {
    "libgtest-dev", "libgmock-dev", "libbenchmark-dev", "nodejs", "libssl-dev", "python3-torch",
    "python3-numpy", "iperf3", "prometheus", "clang", "libclang-rt-14-dev", "docker.io",
    "docker-compose", "debootstrap", "python3-yaml", "iptables", "iproute2", "util-linux",
    "chromium", "fonts-dejavu-core",
}


class ImageBuildStageTest(unittest.TestCase):
    """tools/test.sh makes the CI image from binaries it built (DTRAIN_BINARIES=prebuilt), so the
    Dockerfile's build stage runs only by hand (`bazel test //tests/deploy:compose_test`): its
    package list must not drift from tools/setup.sh's, which every build here uses."""

    def test_build_stage_installs_setups_build_packages(self):
        if not ARGS.setup:
            self.skipTest("no --setup")
        with open(ARGS.setup) as f:
            listed = re.search(r"^PACKAGES=\((.*?)^\)", f.read(), re.S | re.M).group(1)
        setup = set(re.sub(r"#[^\n]*", "", listed).split())
        self.assertFalse(NOT_FOR_THE_BUILD - setup, "names that tools/setup.sh no longer has")
        dockerfile = read("docker", "Dockerfile")
        stage = dockerfile[dockerfile.index(" AS build"):dockerfile.index(" AS prebuilt")]
        install = re.search(r"apt-get install -y --no-install-recommends(.*?)&&", stage, re.S)
        image = set(install.group(1).replace("\\", " ").split())
        self.assertEqual(image, setup - NOT_FOR_THE_BUILD,
                         "deploy/docker/Dockerfile's build stage against tools/setup.sh")


def main():
    global ARGS, DEPLOY
    parser = argparse.ArgumentParser()
    parser.add_argument("--deploy", default="deploy", help="the deploy/ folder")
    parser.add_argument("--cli", default="", help="the dtrain CLI, for `dtrain plan`")
    parser.add_argument("--coordinator", default="", help="the dtrain-coordinator binary")
    parser.add_argument("--worker", default="", help="the dtrain-worker binary")
    parser.add_argument("--setup", default="", help="tools/setup.sh, for its package list")
    ARGS, rest = parser.parse_known_args()
    DEPLOY = os.path.abspath(ARGS.deploy)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
