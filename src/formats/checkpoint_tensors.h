// The tensor files of a checkpoint, written and read a slab piece at a time (Note [Slab pieces]
// in model/slab_piece.h; Note [Checkpoint format] in formats/checkpoint.h).
//
// Note [Checkpoint tensor streams]
// A checkpoint holds three streams of the same tensors, in HF names and layout and in layout
// order, one file each: the masters (model.safetensors, "<name>"), AdamW's m (exp_avg.safetensors,
// "exp_avg.<name>") and v (exp_avg_sq.safetensors, "exp_avg_sq.<name>"). One file per stream, as a
// piece brings all three and each file is written front to back (its CRC32C grows with it): with
// the moments interleaved, a piece smaller than a tensor would need the tensor buffered.
// A tensor HF lays out as Strata does is appended from, or read into, the piece by element range.
// A Conv1D weight (HF holds it transposed) is converted whole through one scratch; when piece
// boundaries cut it, its stream gathers it (save) or keeps it converted (load) in one tensor's
// buffer. Host memory: one tensor of scratch, plus one per stream while a piece cuts a Conv1D.
// Version 1 kept both moments in optimizer.safetensors; StateFileReader reads it (tensors by name).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/file_util.h"
#include "formats/safetensors.h"
#include "io/sequential_file.h"
#include "model/layout.h"
#include "model/slab_piece.h"

namespace strata {

enum StateStream : int { kMasterStream, kExpAvgStream, kExpAvgSqStream, kStateStreamCount };

// Tensor name prefix of a stream ("", "exp_avg.", "exp_avg_sq.").
const char* state_stream_prefix(StateStream s);

// Writes the three streams (`files`, in StateStream order, their headers already appended) as
// slabs' pieces arrive.
class StateFileWriter {
 public:
  StateFileWriter(const ParamLayout& layout, std::array<SequentialFile*, kStateStreamCount> files);
  // `read` hands over slab `slab`'s pieces; they must cover it in order (internal otherwise).
  Status write_slab(int64_t slab, const std::function<Status(const SlabPieceFn&)>& read);
  int64_t buffer_bytes() const { return buffer_bytes_; }  // the most held at once

 private:
  Status take(const Slab& s, const SlabPiece& p);
  Status append_tensor_range(StateStream k, int64_t tensor, const float* src, int64_t lo,
                             int64_t hi);
  float* partial(StateStream k);

  const ParamLayout& layout_;
  std::array<SequentialFile*, kStateStreamCount> files_;
  int64_t max_transposed_ = 0;  // elements of the largest Conv1D weight
  std::vector<float> scratch_;  // (max_transposed_) one tensor in HF layout
  // (max_transposed_) per stream, allocated when a piece first cuts a Conv1D weight.
  std::array<std::vector<float>, kStateStreamCount> partial_;
  int64_t next_ = 0;  // the slab element the next piece must start at
  int64_t buffer_bytes_ = 0;
};

// Where a load's pieces come from: a version 2 checkpoint's Hugging Face files
// (StateFileReader) or a sharded one's rank files (ShardedStateReader, formats/checkpoint_shards.h).
class StateSource {
 public:
  virtual ~StateSource() = default;
  // Fills piece `p` of slab `slab`: its master, m and v (padding zero).
  virtual Status fill(int64_t slab, const SlabPiece& p) = 0;
  virtual int64_t buffer_bytes() const = 0;  // the most bytes of buffers held at once
};

// The streams of one verified checkpoint directory, every tensor found and its dtype and shape
// checked at open (so a bad header changes no trainer state), filled into pieces by range.
class StateFileReader : public StateSource {
 public:
  // `version`: the manifest's (1: both moments in optimizer.safetensors).
  static Result<std::unique_ptr<StateFileReader>> open(const std::string& dir,
                                                       const ParamLayout& layout, int version,
                                                       ReadStats* stats);
  // Fills piece `p` of slab `slab` from the files (padding zero). Pieces must come in order.
  Status fill(int64_t slab, const SlabPiece& p) override;
  int64_t buffer_bytes() const override { return buffer_bytes_; }

 private:
  struct TensorFile {
    SafeTensorsHeader header;
    ReadOnlyFile file;
  };
  StateFileReader(const std::string& dir, const ParamLayout& layout) : dir_(dir), layout_(layout) {}
  Status read_tensor_range(StateStream k, int64_t tensor, float* dst, int64_t lo, int64_t hi);

  std::string dir_;
  const ParamLayout layout_;  // a copy: the reader outlives its opener's (open_checkpoint_state)
  std::vector<std::unique_ptr<TensorFile>> files_;
  // Per stream, per tensor of the layout: its file (index into files_) and entry.
  std::array<std::vector<std::pair<size_t, const StEntry*>>, kStateStreamCount> entries_;
  int64_t max_transposed_ = 0;
  std::vector<float> staged_;  // (max_transposed_) one tensor as the file holds it
  // Per stream: a Conv1D weight converted to Strata's layout, kept while pieces cut it.
  std::array<std::vector<float>, kStateStreamCount> converted_;
  std::array<int64_t, kStateStreamCount> converted_tensor_{-1, -1, -1};
  int64_t next_slab_ = -1, next_ = 0;
  int64_t buffer_bytes_ = 0;
};

// Tensor `tensor` of `layout` into dst ((numel) f32, Strata's layout) from its entry in a file
// that holds it in Hugging Face's layout: read straight in, or, for a Conv1D weight (HF holds it
// transposed), read into `scratch` ((numel) f32) and converted. The checkpoint reader and
// `strata sample` read tensors through it.
Status read_hf_tensor(const ReadOnlyFile& file, const StEntry& entry, const ParamLayout& layout,
                      int64_t tensor, float* dst, float* scratch);

// The file names of the three streams, in StateStream order, for a checkpoint of `version`.
std::array<std::string, kStateStreamCount> state_file_names(int version);

}  // namespace strata
