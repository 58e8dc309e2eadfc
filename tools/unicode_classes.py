#!/usr/bin/env python3
"""The Unicode classes of src/data/unicode_classes.cpp, from Python's unicodedata.

  unicode_classes.py check CLASSES.txt   compare `tokenizer_check classes` output with
                                         unicodedata: exit 1 naming the first difference
  unicode_classes.py emit                print the C++ tables (kLetters, kNumbers) to paste
                                         into unicode_classes.cpp for another Unicode version

Letters are general categories L*, numbers N*, spaces the White_Space property (PropList.txt,
which unicodedata does not expose; the list is Unicode's, unchanged since 6.3).
"""
import sys
import unicodedata

WHITE_SPACE = [(0x9, 0xD), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
               (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F),
               (0x3000, 0x3000)]


def class_of(cp):
    if any(a <= cp <= b for a, b in WHITE_SPACE):
        return "S"
    cat = unicodedata.category(chr(cp))
    return {"L": "L", "N": "N"}.get(cat[0])


def runs(pred_class):
    out, start, cur = [], 0, None
    for cp in range(0x110001):
        c = pred_class(cp) if cp < 0x110000 else None
        if c != cur:
            if cur is not None:
                out.append((start, cp - 1, cur))
            start, cur = cp, c
    return out


def emit():
    for name, cls in (("kLetters", "L"), ("kNumbers", "N")):
        rs = runs(lambda cp: cls if unicodedata.category(chr(cp))[0] == cls else None)
        print(f"constexpr CodeRange {name}[] = {{")
        line = "   "
        for a, b, _ in rs:
            item = f" {{0x{a:X}, 0x{b:X}}},"
            if len(line) + len(item) > 100:
                print(line)
                line = "   "
            line += item
        print(line)
        print("};")


def check(path):
    want = runs(class_of)
    got = []
    with open(path) as f:
        for line in f:
            a, b, c = line.split()
            got.append((int(a, 16), int(b, 16), c))
    if got == want:
        print(f"ok   {len(want)} runs of letters, numbers and spaces over all 0x110000 code points "
              f"equal Unicode {unicodedata.unidata_version}'s")
        return 0
    for i, (g, w) in enumerate(zip(got + [None] * len(want), want + [None] * len(got))):
        if g != w:
            fmt = lambda r: "none" if r is None else f"U+{r[0]:04X}..U+{r[1]:04X} {r[2]}"
            print(f"unicode_classes: run {i} differs: Strata has {fmt(g)}, Unicode "
                  f"{unicodedata.unidata_version} has {fmt(w)} (emit prints the tables anew)",
                  file=sys.stderr)
            return 1
    return 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2]))
    if len(sys.argv) == 2 and sys.argv[1] == "emit":
        emit()
        sys.exit(0)
    print(__doc__, file=sys.stderr)
    sys.exit(2)
