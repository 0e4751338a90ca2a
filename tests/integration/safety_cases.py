"""Integration cases: no job ever loses or mixes another's files, and failures are told truly.

Each case_* function is one Bazel test (listed in BUILD) and states what it checks.
"""
