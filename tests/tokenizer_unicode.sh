#!/usr/bin/env bash
# CTest `tokenizer_unicode`: the pre-tokenizers' character classes (src/data/unicode_classes.h) on
# every code point against Python's unicodedata: letters are L*, numbers N*, spaces White_Space.
set -euo pipefail
: "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/tokenizer_unicode"
rm -rf "$work" && mkdir -p "$work"
"$STRATA_BINARY_DIR/tests/tokenizer_check" classes "$work/classes.txt"
/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/unicode_classes.py" check "$work/classes.txt" ||
  { echo "tokenizer_unicode: FAILED" >&2; exit 1; }
