// Note [Collectives on device memory] (dist/device_collectives.h).
#include "dist/device_collectives.h"

#include <utility>

namespace strata {

DeviceCollectives::DeviceCollectives(Device& dev, Communicator& world,
                                     std::unique_ptr<PeerTransport> transport, int64_t round_elems)
    : dev_(dev), world_(world), transport_(std::move(transport)), round_elems_(round_elems) {}

Status DeviceCollectives::all_reduce_sum(Stream& s, float* data, int64_t count) {
  const int64_t rounds = collective_rounds(count, round_elems_);
  for (int64_t k = 0; k < rounds; ++k) {
    const std::vector<Range> pieces = round_pieces(count, world_.size(), rounds, k);
    STRATA_RETURN_IF_ERROR(reduce_scatter_round(s, data, pieces));
    STRATA_RETURN_IF_ERROR(
        all_gather_round(s, reinterpret_cast<char*>(data), sizeof(float), pieces));
  }
  return Status::ok_status();
}

Status DeviceCollectives::reduce_scatter_sum(Stream& s, float* data, int64_t count) {
  const int64_t rounds = collective_rounds(count, round_elems_);
  for (int64_t k = 0; k < rounds; ++k) {
    STRATA_RETURN_IF_ERROR(
        reduce_scatter_round(s, data, round_pieces(count, world_.size(), rounds, k)));
  }
  return Status::ok_status();
}

Status DeviceCollectives::all_gather(Stream& s, void* data, int64_t count, int64_t elem_bytes) {
  const int64_t rounds = collective_rounds(count, round_elems_);
  for (int64_t k = 0; k < rounds; ++k) {
    STRATA_RETURN_IF_ERROR(all_gather_round(s, static_cast<char*>(data), elem_bytes,
                                            round_pieces(count, world_.size(), rounds, k)));
  }
  return Status::ok_status();
}

Status DeviceCollectives::reserve(int64_t count) {
  // Round 0's pieces are the largest (shard_range gives the first pieces the extra element).
  const std::vector<Range> pieces =
      round_pieces(count, world_.size(), collective_rounds(count, round_elems_), 0);
  const Range mine = pieces[static_cast<size_t>(world_.rank())];
  return grow_parts(nullptr, mine.end - mine.begin);
}

Status DeviceCollectives::grow_parts(Stream* s, int64_t piece_len) {
  const int64_t bytes = world_.size() * piece_len * int64_t{sizeof(float)};
  if (parts_.bytes() >= bytes) return Status::ok_status();  // grown only
  if (s != nullptr) s->synchronize();                       // the old scratch may still be read
  parts_.reset();
  STRATA_ASSIGN_OR_RETURN(parts_, dev_.alloc(bytes));
  return Status::ok_status();
}

Status DeviceCollectives::reduce_scatter_round(Stream& s, float* data,
                                               const std::vector<Range>& pieces) {
  const int ranks = world_.size();
  const Range mine = pieces[static_cast<size_t>(world_.rank())];
  const int64_t len = mine.end - mine.begin, f = sizeof(float);
  STRATA_RETURN_IF_ERROR(grow_parts(&s, len));
  float* parts = parts_.f32();
  // Piece r of this rank's buffer to rank r; row r of parts from rank r. Empty pieces (a buffer
  // of fewer elements than ranks) are not moved: both sides know the lengths.
  STRATA_RETURN_IF_ERROR(transport_->start_group(s));
  for (int r = 0; r < ranks; ++r) {
    const Range p = pieces[static_cast<size_t>(r)];
    if (p.end > p.begin) {
      STRATA_RETURN_IF_ERROR(transport_->send(data + p.begin, (p.end - p.begin) * f, r));
    }
    if (len > 0) STRATA_RETURN_IF_ERROR(transport_->recv(parts + r * len, len * f, r));
  }
  STRATA_RETURN_IF_ERROR(transport_->end_group());
  if (len == 0) return Status::ok_status();
  // Rank order: ((row 0 + row 1) + row 2) ...
  float* out = data + mine.begin;
  if (ranks == 1) {
    dev_.copy(s, out, parts, len * f);
    return Status::ok_status();
  }
  dev_.add(s, out, parts, parts + len, len);
  for (int r = 2; r < ranks; ++r) dev_.add(s, out, out, parts + r * len, len);
  return Status::ok_status();
}

Status DeviceCollectives::all_gather_round(Stream& s, char* data, int64_t elem_bytes,
                                           const std::vector<Range>& pieces) {
  const int ranks = world_.size(), me = world_.rank();
  if (ranks == 1) return Status::ok_status();
  const Range mine = pieces[static_cast<size_t>(me)];
  const int64_t f = elem_bytes;
  STRATA_RETURN_IF_ERROR(transport_->start_group(s));
  for (int r = 0; r < ranks; ++r) {
    const Range p = pieces[static_cast<size_t>(r)];
    if (r == me) continue;
    if (mine.end > mine.begin) {
      STRATA_RETURN_IF_ERROR(
          transport_->send(data + mine.begin * f, (mine.end - mine.begin) * f, r));
    }
    if (p.end > p.begin) {
      STRATA_RETURN_IF_ERROR(transport_->recv(data + p.begin * f, (p.end - p.begin) * f, r));
    }
  }
  return transport_->end_group();
}

std::string DeviceCollectives::describe() const {
  return transport_->describe() + " in device memory";
}

}  // namespace strata
