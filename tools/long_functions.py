#!/usr/bin/env python3
"""Lists the C++ functions longer than a limit; exit status 1 when there is one.

    tools/long_functions.py --max_lines=80 coordinator/*.cc coordinator/policy/*.cc
      183 coordinator/job_manager.cc:1091 absl::StatusOr<ReportProgressResponse> JobManager::Re...

A function is a definition that starts at column 0 (the house style indents no namespace):
a line with '(' that is not a comment, a preprocessor line, a namespace, a type or a using,
and its body from the first '{' to the matching '}'. Its length counts every line from its
first to its closing brace, signature and comments included. Member functions defined inside
a class body (indented) are not seen. Crude on purpose: string and character literals and
line comments are blanked before braces are counted; block comments are not.
Standard library only.
"""

import argparse
import re
import sys

_NOT_A_FUNCTION = ("//", "#", "namespace", "}", "using", "class", "struct", "enum", "template")


def _code(line):
    """The line with its literals blanked and its line comment cut, for counting braces."""
    line = re.sub(r'"([^"\\]|\\.)*"', '""', line)
    line = re.sub(r"'([^'\\]|\\.)*'", "''", line)
    return line.split("//")[0]


def long_functions(text, max_lines):
    """(first line, length, signature) of each function in text longer than max_lines."""
    lines = text.split("\n")
    found = []
    i = 0
    while i < len(lines):
        first = lines[i]
        if not first or first[0].isspace() or first.startswith(_NOT_A_FUNCTION) or "(" not in first:
            i += 1
            continue
        # From the signature to its body's closing brace, or to a ';' before any '{' (a
        # declaration).
        depth, opened, end = 0, False, None
        for j in range(i, len(lines)):
            for ch in _code(lines[j]):
                if ch == "{":
                    depth += 1
                    opened = True
                elif ch == "}":
                    depth -= 1
                elif ch == ";" and not opened:
                    end = j
                    break
            if end is not None or (opened and depth == 0):
                end = j
                break
        if end is None:
            break
        if opened and end - i + 1 > max_lines:
            found.append((i + 1, end - i + 1, first))
        i = end + 1
    return found


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max_lines", type=int, default=80)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    status = 0
    for path in sorted(args.files):
        with open(path, encoding="utf-8") as f:
            for line, length, signature in long_functions(f.read(), args.max_lines):
                print(f"{length:5d} {path}:{line} {signature[:80]}")
                status = 1
    if status == 0:
        print(f"ok: no function over {args.max_lines} lines in {len(args.files)} files")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
