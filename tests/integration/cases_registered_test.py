#!/usr/bin/env python3
"""Every case is registered once: each function case_NAME of integration_test.py and the
*_cases.py modules beside it (which integration_test.py finds by name) has exactly one NAME_test
in tests/integration/BUILD's _CASES, and every name there has its function.

    python3 tests/integration/cases_registered_test.py
"""

import ast
import glob
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def case_functions():
    names = {}
    for path in [os.path.join(HERE, "integration_test.py")] + sorted(
            glob.glob(os.path.join(HERE, "*_cases.py"))):
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("case_"):
                name = node.name[len("case_"):]
                if name in names:
                    sys.exit("case %s is defined twice: %s and %s" % (name, names[name], path))
                names[name] = os.path.basename(path)
    return names


def registered_cases():
    with open(os.path.join(HERE, "BUILD")) as f:
        build = f.read()
    block = build[build.index("_CASES = {"):]
    block = block[:block.index("\n}")]
    names = re.findall(r'^\s*"([a-z0-9_]+)":\s*"(?:small|medium|large|enormous)"', block, re.M)
    return names


def main():
    defined = case_functions()
    registered = registered_cases()
    problems = []
    for name in sorted(set(n for n in registered if registered.count(n) > 1)):
        problems.append("case %s is registered twice in BUILD" % name)
    for name in sorted(set(defined) - set(registered)):
        problems.append("case %s (%s) has no entry in BUILD's _CASES" % (name, defined[name]))
    for name in sorted(set(registered) - set(defined)):
        problems.append("BUILD's _CASES names %s, which no case_%s defines" % (name, name))
    for p in problems:
        print("FAIL: " + p)
    print("%d cases, %d registered" % (len(defined), len(registered)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
