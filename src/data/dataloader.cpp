#include "data/dataloader.h"

#include <limits>

#include "core/check.h"

namespace strata {

Result<DataLoader> DataLoader::create(TokenView tokens, int64_t B, int64_t T,
                                      const std::string& source_name) {
  const int64_t n = tokens.size();
  if (B <= 0 || T <= 0) {
    return invalid_argument(source_name + ": batch shape " + std::to_string(B) + "x" +
                            std::to_string(T) + " must be positive");
  }
  // B*T+1 must not overflow before it is compared with n.
  if (B > (std::numeric_limits<int64_t>::max() - 1) / T) {
    return invalid_argument(source_name + ": batch shape " + std::to_string(B) + "x" +
                            std::to_string(T) + " is too large");
  }
  const int64_t need = B * T + 1;
  if (n < need) {
    return invalid_argument(source_name + ": " + std::to_string(n) +
                            " tokens are too few for one batch of " + std::to_string(B) + "x" +
                            std::to_string(T) + " (needs " + std::to_string(need) +
                            "); lower train.batch_size or train.seq_len");
  }
  return DataLoader(tokens, B, T, source_name);
}

Status DataLoader::next_batch(int32_t* inputs, int32_t* targets) {
  const int64_t bt = B_ * T_;
  const int64_t start = pos_ + bt + 1 > n_ ? 0 : pos_;
  STRATA_RETURN_IF_ERROR(tokens_.copy(start, bt, inputs));
  STRATA_RETURN_IF_ERROR(tokens_.copy(start + 1, bt, targets));
  pos_ = start + bt;
  return Status::ok_status();
}

Status DataLoader::set_position(int64_t pos) {
  if (pos < 0 || pos > n_) {
    return invalid_argument(source_ + ": position " + std::to_string(pos) + " is outside its " +
                            std::to_string(n_) + " tokens");
  }
  pos_ = pos;
  return Status::ok_status();
}

}  // namespace strata
