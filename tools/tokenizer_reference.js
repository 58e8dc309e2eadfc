#!/usr/bin/env node
// Reference tokenizations for the tokenizer tests, from implementations that are not Strata's:
//
//   encode gpt2 TEXT OUT.json       gpt-3-encoder's encode() (OpenAI's GPT-2 encoder in JS)
//   encode cl100k TEXT OUT.json     js-tiktoken's cl100k_base encode(), special tokens as text
//   pretokens gpt2|llama3 TEXT OUT.json   the pattern as a JavaScript regex with the /u flag
//   bin FILE.bin OUT.json           the tokens of an llm.c .bin (version 1 or 2)
//   compare EXPECTED.json ACTUAL.json   exit 1 naming the first difference
//
// OUT.json is {"whole": [...], "lines": [[...], ...]}: the whole text, and each line (with its
// "\n") on its own. Packages come from third_party/npm (scripts/setup.sh).
"use strict";
const fs = require("fs");
const path = require("path");

const npm = path.join(__dirname, "..", "third_party", "npm", "node_modules");

function die(msg) {
  process.stderr.write(`tokenizer_reference: ${msg}\n`);
  process.exit(1);
}

// A module of a package under third_party/npm, by its specifier ("js-tiktoken/lite").
function requireNpm(spec) {
  const dir = path.join(npm, spec.split("/")[0]);
  if (!fs.existsSync(dir)) die(`${dir} is missing: run scripts/setup.sh (npm install)`);
  return require(require.resolve(spec, { paths: [path.dirname(npm)] }));
}

// The two patterns of src/data/pretokenize.h. JavaScript (Node 20) has no (?i:...) group, so
// Llama 3's case-insensitive contractions are spelt out, with the letters their Unicode simple
// case folding matches (s: s S ſ).
const PATTERNS = {
  gpt2: /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu,
  llama3: new RegExp(
    String.raw`'(?:[sSſ]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|` +
      String.raw`\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
    "gu"),
};

function linesOf(text) {
  return text.split(/(?<=\n)/).filter((l) => l.length > 0);
}

function perText(text, f) {
  return { whole: f(text), lines: linesOf(text).map(f) };
}

function encoder(kind) {
  if (kind === "gpt2") return requireNpm("gpt-3-encoder").encode;
  if (kind === "cl100k") {
    const { Tiktoken } = requireNpm("js-tiktoken/lite");
    const ranks = requireNpm("js-tiktoken/ranks/cl100k_base");
    const enc = new Tiktoken(ranks.default || ranks);
    return (t) => enc.encode(t, [], []);  // nothing special is allowed, nothing is refused
  }
  die(`unknown encoder '${kind}'`);
}

function readBin(file) {
  const b = fs.readFileSync(file);
  if (b.length < 1024) die(`${file}: shorter than the llm.c header`);
  const [magic, version, n] = [b.readInt32LE(0), b.readInt32LE(4), b.readInt32LE(8)];
  const width = version === 1 ? 2 : version === 2 ? 4 : 0;
  if (magic !== 20240520 || width === 0) die(`${file}: magic ${magic} version ${version}`);
  if (b.length !== 1024 + width * n) die(`${file}: ${n} tokens but ${b.length} bytes`);
  const ids = new Array(n);
  for (let i = 0; i < n; i++) {
    ids[i] = width === 2 ? b.readUInt16LE(1024 + 2 * i) : b.readUInt32LE(1024 + 4 * i);
  }
  return { version, ids };
}

function firstDifference(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    if (JSON.stringify(a[i]) !== JSON.stringify(b[i])) return i;
  }
  return a.length === b.length ? -1 : n;
}

function compare(expectedFile, actualFile) {
  const e = JSON.parse(fs.readFileSync(expectedFile, "utf8"));
  const a = JSON.parse(fs.readFileSync(actualFile, "utf8"));
  const show = (xs, i) => JSON.stringify(xs.slice(Math.max(0, i - 3), i + 4));
  for (const part of ["lines", "whole"]) {
    if (e[part] === undefined || a[part] === undefined) continue;
    const xs = part === "whole" ? [e.whole] : e.lines;
    const ys = part === "whole" ? [a.whole] : a.lines;
    if (xs.length !== ys.length) die(`${part}: ${xs.length} expected, ${ys.length} found`);
    for (let k = 0; k < xs.length; k++) {
      const i = firstDifference(xs[k], ys[k]);
      if (i < 0) continue;
      const where = part === "whole" ? "the whole text" : `line ${k + 1}`;
      die(`${where} differs at item ${i} of ${xs[k].length}:\n  expected ${show(xs[k], i)}` +
          `\n  found    ${show(ys[k], i)}`);
    }
  }
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === "encode" && args.length === 3) {
  const f = encoder(args[0]);
  const text = fs.readFileSync(args[1], "utf8");
  fs.writeFileSync(args[2], JSON.stringify(perText(text, f)));
} else if (cmd === "pretokens" && args.length === 3) {
  const re = PATTERNS[args[0]];
  if (!re) die(`unknown pattern '${args[0]}'`);
  const text = fs.readFileSync(args[1], "utf8");
  fs.writeFileSync(args[2], JSON.stringify(perText(text, (t) => t.match(re) || [])));
} else if (cmd === "bin" && args.length === 2) {
  const { version, ids } = readBin(args[0]);
  fs.writeFileSync(args[1], JSON.stringify({ version, whole: ids }));
} else if (cmd === "compare" && args.length === 2) {
  compare(args[0], args[1]);
} else {
  die("usage: encode gpt2|cl100k TEXT OUT | pretokens gpt2|llama3 TEXT OUT | bin FILE OUT | " +
      "compare EXPECTED ACTUAL");
}
