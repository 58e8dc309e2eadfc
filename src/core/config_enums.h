// The choices a config makes by name (train.schedule, activations.policy, activations.tier,
// io.engine, data.format, device), parsed once into enums: everything past parse_config
// switches on the enum, and the name of each value is written here only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace strata {

enum class Schedule : uint8_t { in_memory, horizontal, vertical };        // train.schedule
enum class ActsPolicy : uint8_t { recompute, keep, offload, automatic };  // activations.policy
enum class ActsTier : uint8_t { storage, host };                          // activations.tier
enum class IoEngineKind : uint8_t { automatic, uring, posix };            // io.engine
enum class TokenFormat : uint8_t { auto_detect, llmc, raw_u16 };          // data.format
enum class DeviceKind : uint8_t { cpu, cuda };                            // device

// The config's name of each value ("in_memory", "auto", "raw_u16", ...).
const char* enum_name(Schedule v);
const char* enum_name(ActsPolicy v);
const char* enum_name(ActsTier v);
const char* enum_name(IoEngineKind v);
const char* enum_name(TokenFormat v);
const char* enum_name(DeviceKind v);

// The value named `text`, or invalid_argument naming `field` and every choice, e.g.
// "train.schedule 'diagonal' is not one of in_memory, horizontal, vertical".
template <typename E>
Result<E> parse_enum(std::string_view field, std::string_view text);

// Whether a schedule streams state through a plan (horizontal, vertical).
inline bool is_offloaded(Schedule s) {
  return s != Schedule::in_memory;
}

}  // namespace strata
