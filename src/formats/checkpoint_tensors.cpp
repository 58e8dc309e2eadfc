// Note [Checkpoint tensor streams] in checkpoint_tensors.h.
#include "formats/checkpoint_tensors.h"

#include <algorithm>
#include <cstring>

#include "model/hf_names.h"

namespace strata {

namespace {

constexpr std::array<StateStream, kStateStreamCount> kStreams = {kMasterStream, kExpAvgStream,
                                                                 kExpAvgSqStream};

// The piece's data of stream k.
float* piece_data(const SlabPiece& p, StateStream k) {
  switch (k) {
    case kMasterStream:
      return p.master;
    case kExpAvgStream:
      return p.m;
    case kExpAvgSqStream:
      return p.v;
    case kStateStreamCount:
      break;
  }
  return nullptr;
}

// Elements of the largest tensor HF holds transposed.
int64_t largest_transposed(const ParamLayout& layout) {
  int64_t n = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(layout.tensors.size()); ++i) {
    if (hf_tensor(layout, i).transposed) {
      n = std::max(n, layout.tensors[static_cast<size_t>(i)].numel());
    }
  }
  return n;
}

// The piece must continue the slab where the last one ended.
Status check_piece(const Slab& s, const SlabPiece& p, int64_t next) {
  if (p.begin != next || p.count <= 0 || p.begin + p.count > s.numel || p.master == nullptr ||
      p.m == nullptr || p.v == nullptr) {
    return internal_error("slab " + s.name + ": a piece of elements [" + std::to_string(p.begin) +
                          ", " + std::to_string(p.begin + p.count) + ") where [" +
                          std::to_string(next) + ", ...) of " + std::to_string(s.numel) +
                          " was due (Note [Slab pieces])");
  }
  return Status();
}

// Slab-relative element range [first, second) of tensor i.
std::pair<int64_t, int64_t> tensor_range(const ParamLayout& layout, const Slab& s, int64_t i) {
  const ParamTensor& t = layout.tensors[static_cast<size_t>(i)];
  return {t.offset - s.offset, t.offset - s.offset + t.numel()};
}

}  // namespace

const char* state_stream_prefix(StateStream s) {
  switch (s) {
    case kMasterStream:
      return "";
    case kExpAvgStream:
      return "exp_avg.";
    case kExpAvgSqStream:
      return "exp_avg_sq.";
    case kStateStreamCount:
      break;
  }
  return "";
}

std::array<std::string, kStateStreamCount> state_file_names(int version) {
  if (version == 1) return {"model.safetensors", "optimizer.safetensors", "optimizer.safetensors"};
  return {"model.safetensors", "exp_avg.safetensors", "exp_avg_sq.safetensors"};
}

// ---- Writing ------------------------------------------------------------------------------------

StateFileWriter::StateFileWriter(const ParamLayout& layout,
                                 std::array<SequentialFile*, kStateStreamCount> files)
    : layout_(layout), files_(files), max_transposed_(largest_transposed(layout)) {
  scratch_.resize(static_cast<size_t>(max_transposed_));
  buffer_bytes_ = max_transposed_ * 4;
}

float* StateFileWriter::partial(StateStream k) {
  std::vector<float>& buf = partial_[static_cast<size_t>(k)];
  if (buf.empty()) {
    buf.resize(static_cast<size_t>(max_transposed_));
    int64_t held = static_cast<int64_t>(scratch_.size());
    for (const auto& b : partial_) held += static_cast<int64_t>(b.size());
    buffer_bytes_ = std::max(buffer_bytes_, held * 4);
  }
  return buf.data();
}

Status StateFileWriter::write_slab(int64_t slab,
                                   const std::function<Status(const SlabPieceFn&)>& read) {
  const Slab& s = layout_.slabs[static_cast<size_t>(slab)];
  next_ = 0;
  STRATA_RETURN_IF_ERROR(read([&](const SlabPiece& p) { return take(s, p); }));
  if (next_ != s.numel) {
    return internal_error("slab " + s.name + ": the pieces covered " + std::to_string(next_) +
                          " of its " + std::to_string(s.numel) + " elements (Note [Slab pieces])");
  }
  return Status();
}

Status StateFileWriter::take(const Slab& s, const SlabPiece& p) {
  STRATA_RETURN_IF_ERROR(check_piece(s, p, next_));
  const int64_t end = p.begin + p.count;
  for (int64_t i = s.first_tensor; i < s.first_tensor + s.tensor_count; ++i) {
    const auto [t0, t1] = tensor_range(layout_, s, i);
    const int64_t lo = std::max(t0, p.begin), hi = std::min(t1, end);
    if (lo >= hi) continue;
    for (StateStream k : kStreams) {
      STRATA_RETURN_IF_ERROR(
          append_tensor_range(k, i, piece_data(p, k) + (lo - p.begin), lo - t0, hi - t0));
    }
  }
  next_ = end;
  return Status();
}

// Elements [lo, hi) of tensor i (tensor-relative) of stream k, Strata layout at `src`.
Status StateFileWriter::append_tensor_range(StateStream k, int64_t i, const float* src, int64_t lo,
                                            int64_t hi) {
  SequentialFile& f = *files_[static_cast<size_t>(k)];
  const ParamTensor& t = layout_.tensors[static_cast<size_t>(i)];
  if (!hf_tensor(layout_, i).transposed) return f.append(src, (hi - lo) * 4);
  const float* whole = src;  // (numel) Strata layout, once complete
  if (lo != 0 || hi != t.numel()) {
    float* gathered = partial(k);
    std::memcpy(gathered + lo, src, static_cast<size_t>((hi - lo) * 4));
    if (hi != t.numel()) return Status();  // the rest comes with the next pieces
    whole = gathered;
  }
  to_hf_layout(t, whole, scratch_.data());
  return f.append(scratch_.data(), t.numel() * 4);
}

// ---- Reading ------------------------------------------------------------------------------------

Status read_hf_tensor(const ReadOnlyFile& file, const StEntry& entry, const ParamLayout& layout,
                      int64_t tensor, float* dst, float* scratch) {
  if (!hf_tensor(layout, tensor).transposed) return file.read_at(dst, entry.bytes, entry.offset);
  STRATA_RETURN_IF_ERROR(file.read_at(scratch, entry.bytes, entry.offset));
  from_hf_layout(layout.tensors[static_cast<size_t>(tensor)], scratch, dst);
  return Status();
}

Result<std::unique_ptr<StateFileReader>> StateFileReader::open(const std::string& dir,
                                                               const ParamLayout& layout,
                                                               int version, ReadStats* stats) {
  std::unique_ptr<StateFileReader> r(new StateFileReader(dir, layout));
  const auto names = state_file_names(version);
  std::vector<std::string> opened;
  for (StateStream k : kStreams) {
    const std::string& name = names[static_cast<size_t>(k)];
    auto at = std::find(opened.begin(), opened.end(), name);
    size_t fi = static_cast<size_t>(at - opened.begin());
    if (at == opened.end()) {
      const std::string path = dir + "/" + name;
      STRATA_ASSIGN_OR_RETURN(SafeTensorsHeader header, read_safetensors_header(path));
      STRATA_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::open(path, "checkpoint file"));
      if (stats != nullptr) file.count_reads_in(stats);
      r->files_.push_back(
          std::make_unique<TensorFile>(TensorFile{std::move(header), std::move(file)}));
      opened.push_back(name);
    }
    const TensorFile& tf = *r->files_[fi];
    auto& entries = r->entries_[static_cast<size_t>(k)];
    for (int64_t i = 0; i < static_cast<int64_t>(layout.tensors.size()); ++i) {
      const HfTensor h = hf_tensor(layout, i);
      auto entry = tf.header.f32_entry(state_stream_prefix(k) + h.name, h.shape);
      if (!entry.ok()) return bad_format("checkpoint " + dir + ": " + entry.status().message());
      entries.emplace_back(fi, *entry);
    }
  }
  r->max_transposed_ = largest_transposed(layout);
  r->staged_.resize(static_cast<size_t>(r->max_transposed_));
  r->buffer_bytes_ = r->max_transposed_ * 4;
  return r;
}

Status StateFileReader::fill(int64_t slab, const SlabPiece& p) {
  const Slab& s = layout_.slabs[static_cast<size_t>(slab)];
  if (slab != next_slab_) next_slab_ = slab, next_ = 0;
  STRATA_RETURN_IF_ERROR(check_piece(s, p, next_));
  const int64_t end = p.begin + p.count;
  for (StateStream k : kStreams) {
    float* dst = piece_data(p, k);
    std::fill_n(dst, p.count, 0.0f);  // the padding between tensors
    for (int64_t i = s.first_tensor; i < s.first_tensor + s.tensor_count; ++i) {
      const auto [t0, t1] = tensor_range(layout_, s, i);
      const int64_t lo = std::max(t0, p.begin), hi = std::min(t1, end);
      if (lo >= hi) continue;
      STRATA_RETURN_IF_ERROR(read_tensor_range(k, i, dst + (lo - p.begin), lo - t0, hi - t0));
    }
  }
  next_ = end;
  return Status();
}

// Elements [lo, hi) of tensor i (tensor-relative, Strata layout) of stream k into `dst`.
Status StateFileReader::read_tensor_range(StateStream k, int64_t i, float* dst, int64_t lo,
                                          int64_t hi) {
  const auto [fi, entry] = entries_[static_cast<size_t>(k)][static_cast<size_t>(i)];
  const ReadOnlyFile& file = files_[fi]->file;
  const ParamTensor& t = layout_.tensors[static_cast<size_t>(i)];
  if (lo == 0 && hi == t.numel())
    return read_hf_tensor(file, *entry, layout_, i, dst, staged_.data());
  if (!hf_tensor(layout_, i).transposed) {
    return file.read_at(dst, (hi - lo) * 4, entry->offset + lo * 4);
  }
  // A piece cuts this Conv1D weight: convert it once, keep it for the pieces that follow.
  std::vector<float>& conv = converted_[static_cast<size_t>(k)];
  int64_t& held = converted_tensor_[static_cast<size_t>(k)];
  if (held != i) {
    if (conv.empty()) {
      conv.resize(static_cast<size_t>(max_transposed_));
      int64_t bytes = static_cast<int64_t>(staged_.size());
      for (const auto& c : converted_) bytes += static_cast<int64_t>(c.size());
      buffer_bytes_ = std::max(buffer_bytes_, bytes * 4);
    }
    STRATA_RETURN_IF_ERROR(read_hf_tensor(file, *entry, layout_, i, conv.data(), staged_.data()));
    held = i;
  }
  std::memcpy(dst, conv.data() + lo, static_cast<size_t>((hi - lo) * 4));
  return Status();
}

}  // namespace strata
