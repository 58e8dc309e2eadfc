#!/usr/bin/env python3
"""Lists C++ function bodies longer than a limit (default 80 lines), longest first.

usage: tools/long_functions.py [--limit N] [DIR ...]   (default DIR: src)

A definition is a line that ends a signature with '{' (optionally after const/override/
noexcept/-> T) at namespace or class level; its body runs to the matching brace. Braces in
strings, characters and comments are skipped. Lambdas inside a body count toward the body.
Good enough to watch the style rule "functions under ~80 lines"; not a C++ parser.
"""
import argparse
import os
import re
import sys

SIGNATURE_END = re.compile(
    r"\)\s*(const\s*)?(noexcept\s*)?(override\s*)?(final\s*)?(->\s*[\w:<>,\s*&]+)?\{\s*$")
NOT_A_FUNCTION = re.compile(r"^\s*(if|for|while|switch|catch|else|do|return|case)\b|=\s*\[")


def strip_literals(line, in_block_comment):
    """The line without strings, chars and comments; and whether a /* */ comment is still open."""
    out, i = [], 0
    while i < len(line):
        if in_block_comment:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out), True
            i, in_block_comment = end + 2, False
            continue
        c = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            in_block_comment, i = True, i + 2
            continue
        if c in "\"'":
            j = i + 1
            while j < len(line) and line[j] != c:
                j += 2 if line[j] == "\\" else 1
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out), in_block_comment


def functions(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    depth, in_comment, start, name, start_depth = 0, False, None, None, 0
    for n, raw in enumerate(lines, 1):
        code, in_comment = strip_literals(raw.rstrip("\n"), in_comment)
        if start is None and SIGNATURE_END.search(code) and not NOT_A_FUNCTION.search(code):
            # A definition at namespace scope or directly inside a class.
            if depth <= 2:
                j = n - 1  # lines[j] is the current line; earlier lines of the signature precede it
                sig = code
                while "(" not in sig and j > 0:
                    j -= 1
                    sig = strip_literals(lines[j], False)[0].strip() + " " + sig
                m = re.search(r"([\w:~]+)\s*\(", sig)
                start, name, start_depth = n, (m.group(1) if m else "?"), depth
        depth += code.count("{") - code.count("}")
        if start is not None and depth <= start_depth:
            yield name, start, n - start + 1
            start = None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("dirs", nargs="*", default=["src"])
    a = ap.parse_args()
    rows = []
    for d in a.dirs:
        for root, _, files in os.walk(d):
            for fn in files:
                if fn.endswith((".cpp", ".h", ".cu", ".cuh")):
                    p = os.path.join(root, fn)
                    rows += [(n, p, s, name) for name, s, n in functions(p) if n > a.limit]
    for n, p, s, name in sorted(rows, reverse=True):
        print(f"{n:5d}  {p}:{s}  {name}")
    print(f"{len(rows)} functions over {a.limit} lines", file=sys.stderr)


if __name__ == "__main__":
    main()
