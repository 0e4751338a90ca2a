#!/bin/bash
# The layers of dtrain that Bazel visibility cannot see: visibility checks direct dependencies,
# this checks what each binary links through all of them.
#
#   layers_test.sh DEPS_FILE FORBIDDEN_REGEX [DEPS_FILE FORBIDDEN_REGEX ...]
#
# DEPS_FILE is a genquery's output (one label a line, the deps of one target); every label
# matching FORBIDDEN_REGEX (grep -E) is a layer broken, printed with the file it came from.
set -u
status=0
while [ $# -ge 2 ]; do
  deps=$1 forbidden=$2
  shift 2
  found=$(grep -E "$forbidden" "$deps")
  if [ -n "$found" ]; then
    echo "FAIL: $(basename "$deps" .txt) links what its layer forbids (/$forbidden/):"
    echo "$found" | sed 's/^/  /'
    status=1
  else
    echo "ok: $(basename "$deps" .txt): $(wc -l < "$deps") targets, none matching /$forbidden/"
  fi
done
[ $# -eq 0 ] || { echo "usage: layers_test.sh (DEPS_FILE FORBIDDEN_REGEX)..."; exit 2; }
exit $status
