// Which token files a data field names: one path, a glob, or a comma-separated list of either.
//
// Note [Token file lists]
// data.train, data.val and `strata eval --data` take "train.bin", "shards/train_*.bin" (llm.c's
// fineweb_train_000001.bin, ...) or "a.bin,b.bin,more_*.bin". A pattern (one of * ? [) expands to
// its matches sorted by name, so the list, and with it the data order (Note [Sharded corpora] in
// data/dataloader.h), is the same on every machine. A pattern that matches nothing, an empty
// element, and a file named twice are refused with one line naming the field and the element; a
// plain path is opened as it is (a missing one is the token file's not_found).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace strata {

// The files of `spec`, in order; `field` ("data.train") names it in errors.
Result<std::vector<std::string>> expand_token_paths(const std::string& spec,
                                                    const std::string& field);

}  // namespace strata
