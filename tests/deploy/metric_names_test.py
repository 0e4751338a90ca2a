"""Every metric (and label) the dashboards and alert rules query is one the daemons export.

The source of truth is the C++ sources: the registration calls
`AddCounter("dtrain_...")`, `AddGauge(...)`, `AddHistogram(...)` in coordinator/, worker/ and
common/ (tests and the metrics library itself left out). A histogram exports NAME_bucket,
NAME_sum and NAME_count. So renaming a metric in C++ without the dashboards (or the other way
round) fails this test. The sources are read from the workspace (found through the real path of
a runfile); the daemons' binaries are data of this test only so that Bazel runs it again when
they change. (Their bytes cannot be checked for the names: GCC stores short literals as
immediates.)

Also: the labels a query uses (by/on/without lists, selectors, legends, alert annotations) must
be labels of the metrics it reads, as registered (the call's label list, constants it names
resolved), or Prometheus' job/instance/le; `job` (the scrape job) only matched against a
scrape job of prometheus.yml; and every query must parse (promtool check rules over a rules file
made of the queries, $variables substituted).

Usage (Bazel passes it): metric_names_test.py --workspace_file=PATH
Runs with Debian's python3 and PyYAML (python3-yaml).
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import yaml

REGISTRATION = re.compile(r'Add(Counter|Gauge|Histogram)\(\s*"(dtrain_[a-zA-Z0-9_]+)"')
STRING = re.compile(r'"([a-zA-Z_][a-zA-Z0-9_]*)"')
CONSTANT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*=\s*\{([^{}]*)\}\s*;")
NAME_TOKEN = re.compile(r"\bdtrain_[a-zA-Z0-9_]+\b")
# Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"job", "instance"}
# Not label names, should the scan below pick one up.
PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset",
}

ARGS = None


def workspace_root(path):
    """The source tree: the real path of a runfile that is a source file, up to the WORKSPACE."""
    real = os.path.realpath(path)
    d = os.path.dirname(real)
    while d != "/":
        if os.path.exists(os.path.join(d, "WORKSPACE")):
            return d
        d = os.path.dirname(d)
    raise RuntimeError(f"no WORKSPACE above {real} (from {path})")


def source_files(root):
    out = []
    for top in ("coordinator", "worker", "common"):
        for path in glob.glob(os.path.join(root, top, "**", "*.cc"), recursive=True) + glob.glob(
            os.path.join(root, top, "**", "*.h"), recursive=True
        ):
            rel = os.path.relpath(path, root)
            base = os.path.basename(path)
            if rel.startswith(os.path.join("common", "metrics") + os.sep):
                continue  # the library: its docs and tests use example names
            if base.endswith("_test.cc") or base.startswith("testing.") or "fake_" in base:
                continue
            out.append(path)
    return sorted(out)


def call_args(text, open_paren):
    """The top-level arguments of the C++ call whose '(' is at text[open_paren]."""
    args, depth, i, start = [], 0, open_paren, open_paren + 1
    while i < len(text):
        c = text[i]
        if c == '"':
            i += 1
            while text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
            if depth == 0:
                args.append(text[start:i].strip())
                return args
        elif c == "," and depth == 1:
            args.append(text[start:i].strip())
            start = i + 1
        i += 1
    raise ValueError("unbalanced call")


def registered_metrics(root):
    """{name: (type, frozenset of label names)} from the registration calls.

    The label names are the string literals of the call's third argument, plus those of the
    brace-initialized constants it names (`kJob`, `With(kJob, {"peer", "kind"})`).
    """
    metrics, where = {}, {}
    for path in source_files(root):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        consts = {m.group(1): set(STRING.findall(m.group(2)))
                  for m in CONSTANT.finditer(text)}
        for m in REGISTRATION.finditer(text):
            kind, name = m.group(1).lower(), m.group(2)
            args = call_args(text, m.end() - len(m.group(0)) + len("Add" + m.group(1)))
            label_arg = args[2] if len(args) > 2 else ""
            labels = set(STRING.findall(label_arg))
            for ident in re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b",
                                    re.sub(r'"(?:[^"\\\\]|\\\\.)*"', "", label_arg)):
                if ident in consts:
                    labels |= consts[ident]
                elif ident not in ("With", "std", "vector", "string"):
                    raise AssertionError(
                        f"{path}: cannot resolve the labels of {name} ({label_arg!r}); teach "
                        "tests/deploy/metric_names_test.py this style")
            if name in metrics and where[name] != path:
                raise AssertionError(f"{name} registered in {where[name]} and {path}")
            metrics[name] = (kind, frozenset(labels))
            where[name] = path
    return metrics


def exported_series_names(metrics):
    """{series name: registered name}."""
    names = {}
    for name, (kind, _) in metrics.items():
        if kind == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                names[name + suffix] = name
        else:
            names[name] = name
    return names


def substitute(expr):
    """Grafana variables to something PromQL parses."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m")
    expr = expr.replace("$__range", "1h")
    return re.sub(r"\$\{?([a-zA-Z_]+)\}?", r"\1_value", expr)


def dashboard_queries(deploy):
    """(where, expr, legend) of every target and query variable of deploy/grafana/dashboards/*.json."""
    out = []
    for path in sorted(glob.glob(os.path.join(deploy, "grafana", "dashboards", "*.json"))):
        with open(path) as f:
            board = json.load(f)
        name = os.path.basename(path)

        def panels(items):
            for p in items:
                yield p
                yield from panels(p.get("panels", []))

        for p in panels(board.get("panels", [])):
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((f"{name}: panel {p.get('title')!r} {t.get('refId')}", t["expr"],
                                t.get("legendFormat", "")))
        for v in board.get("templating", {}).get("list", []):
            if v.get("type") == "query":
                q = v.get("query")
                q = q.get("query") if isinstance(q, dict) else q
                out.append((f"{name}: variable {v.get('name')}", q, ""))
    return out


def alert_queries(deploy):
    with open(os.path.join(deploy, "prometheus", "alerts.yml")) as f:
        rules = yaml.safe_load(f)
    out = []
    for group in rules["groups"]:
        for rule in group["rules"]:
            where = f"alerts.yml: {rule.get('alert') or rule.get('record')}"
            text = " ".join(str(v) for v in rule.get("annotations", {}).values())
            out.append((where, rule["expr"], text))
    return out


def grouping_labels(expr):
    """Label names of by/without/on/ignoring/group_left/group_right lists."""
    names = set()
    for m in re.finditer(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        names.update(n.strip() for n in m.group(1).split(",") if n.strip())
    return names


def matchers(expr):
    """(label, op, value) of every selector matcher."""
    out = []
    for m in re.finditer(r"\{([^{}]*)\}", expr):
        for mm in re.finditer(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"', m.group(1)):
            out.append(mm.groups())
    return out


def template_labels(text):
    """Labels of Grafana legends ({{rank}}) and alert annotations ({{ $labels.rank }})."""
    return set(re.findall(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}", text)) | set(
        re.findall(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)", text))


class MetricNamesTest(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.root = workspace_root(ARGS.workspace_file)
        cls.deploy = os.path.join(cls.root, "deploy")
        cls.metrics = registered_metrics(cls.root)
        cls.exported = exported_series_names(cls.metrics)
        cls.queries = dashboard_queries(cls.deploy) + alert_queries(cls.deploy)
        with open(os.path.join(cls.deploy, "prometheus", "prometheus.yml")) as f:
            cls.scrape_jobs = {j["job_name"] for j in yaml.safe_load(f)["scrape_configs"]}

    def test_sources_register_the_metrics(self):
        # A floor, so that a broken scan (files moved, another registration style) cannot pass
        # by finding nothing.
        # "tls": dtrain_tls_certificate_expiry_timestamp_seconds, which both daemons export.
        components = {n.split("_")[1] for n in self.metrics}
        self.assertEqual(components, {"coordinator", "worker", "tls"}, sorted(self.metrics))
        self.assertGreaterEqual(len(self.metrics), 20, sorted(self.metrics))
        self.assertEqual(self.metrics["dtrain_coordinator_rpcs_total"][1], {"method", "code"})

    def test_queried_metrics_are_exported(self):
        self.assertGreater(len(self.queries), 20)
        unknown = []
        used = set()
        for where, expr, _ in self.queries:
            for name in NAME_TOKEN.findall(expr):
                used.add(name)
                if name not in self.exported:
                    hint = ""
                    base = re.sub(r"_(bucket|sum|count)$", "", name)
                    if name in self.metrics:
                        hint = " (a histogram: query _bucket, _sum or _count)"
                    elif base in self.metrics:
                        hint = f" ({base} is a {self.metrics[base][0]})"
                    unknown.append(f"{where}: {name}{hint}")
        unknown = sorted(set(unknown))
        self.assertEqual(unknown, [], "queried but not exported:\n  " + "\n  ".join(unknown))
        # Every dashboard/alert uses dtrain metrics at all (guards the regex).
        self.assertTrue(any(n.startswith("dtrain_coordinator_") for n in used))
        self.assertTrue(any(n.startswith("dtrain_worker_") for n in used))

    def test_queried_labels_exist(self):
        """Labels a query selects, groups by or shows are labels of the metrics it reads.

        `job` and `instance` are Prometheus' (the scrape job and target), on every series: `job`
        may only be matched against a scrape job of prometheus.yml, never grouped by or shown
        as if it were a dtrain job id (the workers' label for that is job_id).
        """
        problems = []
        for where, expr, text in self.queries:
            names = [self.exported[n] for n in NAME_TOKEN.findall(expr) if n in self.exported]
            if not names:
                continue
            allowed = set().union(*(self.metrics[n][1] for n in names)) | TARGET_LABELS
            if "_bucket" in expr:
                allowed.add("le")
            m = re.match(r"\s*label_values\(\s*[^,]+,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)", expr)
            used = grouping_labels(expr) | template_labels(text) | (
                {m.group(1)} if m else set())
            used |= {label for label, _, _ in matchers(expr)}
            for label in sorted(used - allowed - PROMQL_KEYWORDS):
                problems.append(f"{where}: label {label!r} is not a label of {sorted(set(names))}")
            if "job" in grouping_labels(expr) | template_labels(text) | ({m.group(1)} if m else set()):
                problems.append(f"{where}: `job` is Prometheus' scrape job, not a dtrain job "
                                "(that is job_id)")
            for label, op, value in matchers(expr):
                if label == "job" and not all(
                        v in self.scrape_jobs for v in value.split("|")):
                    problems.append(f"{where}: job{op}\"{value}\": not a scrape job of "
                                    f"prometheus.yml {sorted(self.scrape_jobs)} (a dtrain job "
                                    "id is job_id)")
        problems = sorted(set(problems))
        self.assertEqual(problems, [], "\n  " + "\n  ".join(problems))

    def test_queries_parse(self):
        rules = [{"record": f"check:q{i}", "expr": substitute(expr)}
                 for i, (where, expr, _) in enumerate(self.queries)
                 if not expr.lstrip().startswith("label_values(")]
        with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False,
                                         dir=os.environ.get("TEST_TMPDIR")) as f:
            yaml.safe_dump({"groups": [{"name": "queries", "rules": rules}]}, f)
        result = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True,
                                text=True)
        if result.returncode != 0:
            lines = (result.stdout + result.stderr).strip()
            self.fail(f"promtool check rules on the dashboard queries:\n{lines}\nqueries:\n" +
                      "\n".join(f"  {r['record']}: {r['expr']}" for r in rules))


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--workspace_file", required=True,
                        help="a source file of this workspace, given as its runfile")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
