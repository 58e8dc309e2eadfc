// CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78): the checksum of the tensor
// store's integrity option (docs/design.md §4) and of the small files it writes.
//
// Contract: crc32c(p, n) is the standard CRC-32C (init and final xor 0xFFFFFFFF), so the check
// value holds: crc32c("123456789", 9) == 0xE3069283. The seed chains calls:
// crc32c(b, nb, crc32c(a, na)) == crc32c(a ++ b). Pure functions; any thread.
//
// Two paths compute the same value: the SSE4.2 crc32 instruction, chosen at run time when the CPU
// has it, and a portable slicing-by-8 table path used otherwise (and by the tests as a reference).
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata {

uint32_t crc32c(const void* data, size_t bytes, uint32_t seed = 0);

// The CRC32C of a ++ b from crc32c(a), crc32c(b) and b's length, without the bytes: a file
// written in pieces out of order gets its checksum in file order (Note [Asynchronous
// checkpoints] in model/state_snapshot.h). O(log bytes_b).
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, int64_t bytes_b);

// The two paths, for tests and benchmarks. crc32c_hardware must only be called when
// crc32c_hardware_available() is true.
uint32_t crc32c_portable(const void* data, size_t bytes, uint32_t seed = 0);
uint32_t crc32c_hardware(const void* data, size_t bytes, uint32_t seed = 0);
bool crc32c_hardware_available();

}  // namespace strata
