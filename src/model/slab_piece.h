// How one slab's training state moves between a trainer and the checkpoint files.
//
// Note [Slab pieces]
// A checkpoint carries, per slab, its f32 master weights and AdamW moments m and v. Neither side
// should hold a slab whole: a block's state is 12 bytes per parameter (600 MB at C = 2048) and
// the embedding's more, so whole-slab buffers on both sides were most of the host peak of a save
// or a resume. So the state moves in pieces: element ranges [begin, begin + count) of the slab,
// handed over in increasing order and covering it exactly once, padding included. The trainer
// chooses them (what it holds at once anyway: all of a slab when its state is in memory, one
// optimizer part or one embed chunk in an optimizer stage when it is on storage) and the
// pointers are the trainer's own memory, valid for the call only. The checkpoint side converts to
// and from Hugging Face's layout tensor by tensor and needs one tensor of scratch, plus one per
// stream for a transposed tensor that a piece boundary cuts (formats/checkpoint_tensors.h).
#pragma once

#include <cstdint>
#include <functional>

#include "core/status.h"

namespace strata {

struct SlabPiece {
  int64_t begin = 0;        // first element, from the slab's start
  int64_t count = 0;        // elements
  float* master = nullptr;  // (count) f32 master weights
  float* m = nullptr;       // (count) AdamW first moment
  float* v = nullptr;       // (count) AdamW second moment
};

// Called once per piece: to read it (a save) or to fill it (a load).
using SlabPieceFn = std::function<Status(const SlabPiece&)>;

}  // namespace strata
