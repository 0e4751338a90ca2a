#!/bin/sh
# Bazel's workspace status (.bazelrc: --workspace_status_command): the commit the binaries are
# built from, for their --version (common/version.h). A STABLE_ key, so a new commit rebuilds
# common/build_commit.h and relinks the binaries; nothing else depends on it.
#
# Works offline and without git: outside a git checkout (a docker build, whose context leaves out
# .git; a source tarball) or where git is not installed, the commit is "unknown".
commit=$(git rev-parse HEAD 2>/dev/null) || commit=""
case "$commit" in
  "" | *[!0-9a-f]*) commit=unknown ;;
esac
echo "STABLE_GIT_COMMIT $commit"
