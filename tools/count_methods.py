#!/usr/bin/python3
"""Counts the member functions a class declares in its header: the lines of its body, at the
body's indent, that declare something with a parameter list (constructors, the destructor,
deleted copies, operators and one line per member template included; comments and data members
not). For the issue's "no class over ~30 methods".

usage: count_methods.py HEADER CLASS
"""
import re
import sys


def main():
    path, cls = sys.argv[1], sys.argv[2]
    text = open(path).read()
    start = text.index("class " + cls + " ")
    body = text[start:text.index("\n};", start)].split("\n")[1:]
    names = []
    for line in body:
        code = line.split("//")[0]
        if not re.match(r"  [A-Za-z~]", code) or "(" not in code:
            continue
        if re.match(r"  (return|if|for|while)\b", code):
            continue
        m = re.search(r"(~?[A-Za-z_][A-Za-z0-9_]*(?:<[^>]*>)?|operator=)\(", code)
        names.append(m.group(1) if m else code.strip())
    print(f"{cls}: {len(names)}")
    print(" ".join(names))


if __name__ == "__main__":
    main()
