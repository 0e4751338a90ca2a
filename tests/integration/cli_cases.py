"""Integration cases for the `dtrain` CLI, through the real binary against real daemons.

Each case_* function is one Bazel test (listed in BUILD) and states what it checks.
"""
