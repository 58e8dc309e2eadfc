// The storage directories of an offloaded run (io.dirs), made ready before the run creates
// anything of its own.
//
// Note [Storage directories checked first]
// An offloaded run keeps its store in io.dirs. Each is checked before the run takes the
// checkpoint lock or opens its metrics file, so a bad one leaves nothing behind: a missing
// directory is created (as --checkpoint-dir is, so io.dirs=["/mnt/nvme{rank}/strata"] works on
// every rank without making the directories by hand), and one that is not a directory, or in
// which no file can be created (/proc, a read-only mount, no permission), is refused naming
// io.dirs and the path. The write test makes an unnamed file (O_TMPFILE) that vanishes when
// closed, or, where the file system has none, a named one removed at once.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace strata {

// Each of `dirs` created when missing and checked to take a new file. invalid_argument naming
// io.dirs, the path and the reason for the first that does not.
Status prepare_storage_dirs(const std::vector<std::string>& dirs);

}  // namespace strata
