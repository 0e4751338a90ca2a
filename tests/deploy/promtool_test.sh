#!/usr/bin/env bash
# promtool (Debian's prometheus package) over deploy/prometheus: the configuration, the alert
# rules, and the rules' unit tests in alerts_test.yml.
set -euo pipefail
command -v promtool >/dev/null || { echo "promtool_test: no promtool (apt-get install prometheus)" >&2; exit 1; }
promtool check config deploy/prometheus/prometheus.yml
promtool check rules deploy/prometheus/alerts.yml
promtool test rules tests/deploy/alerts_test.yml
