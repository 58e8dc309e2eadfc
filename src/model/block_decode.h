// One new token through one block, with the block's key/value cache: the step of KV-cached
// sampling (Note [Sampling] in model/sample.h). The same ops as block_forward on a (1, 1)
// sequence, except that attention reads every cached position's keys and values
// (Device::attention_decode) instead of recomputing them.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "model/block.h"
#include "model/layout.h"

namespace strata {

// Per-token scratch of block_decode, reused block after block.
struct DecodeScratch {
  float* ln1;      // (C)
  float* mean;     // (1)  LayerNorm's (GPT-2)
  float* rstd;     // (1)
  float* qkv_pre;  // (qkv_width)  Llama: before rotation
  float* qkv;      // (qkv_width)  q | k | v, k rotated for Llama
  float* atty;     // (C)
  float* attproj;  // (C)
  float* res2;     // (C)
  float* ln2;      // (C)
  float* fch;      // (fc width)  GPT-2: 4C, Llama: gate|up 2F
  float* fch_act;  // (F)
  float* fcproj;   // (C)
  float* scores;   // (NH * context_length)  attention_decode's scratch
};
// d: the model's dims for one token (B = 1, T = 1); context_length bounds the cache.
DecodeScratch decode_scratch_carve(FloatCarver& c, const BlockDims& d, int64_t context_length);
inline int64_t decode_scratch_floats(const BlockDims& d, int64_t context_length) {
  FloatCarver counter(nullptr);
  decode_scratch_carve(counter, d, context_length);
  return counter.used();
}

// The k|v part of a q|k|v row: its floats and where it starts in the row.
inline int64_t kv_row_floats(const BlockDims& d) {
  return d.qkv_width - d.C;
}

// out (C) <- x (C), the token at position `pos`. kv_cache (context_length, kv_row_floats) holds
// positions 0 .. pos-1 of this block; the token's k|v are written at row pos, then attention
// reads rows 0 .. pos. d.rope (Llama) is the whole table: position pos's entries are used.
void block_decode(Device& dev, Stream& s, float* out, const DecodeScratch& g, const float* x,
                  float* kv_cache, int64_t pos, const BlockView& w, const BlockDims& d);

}  // namespace strata
