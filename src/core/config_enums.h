// The choices a config makes by name (train.schedule, train.precision, activations.policy,
// activations.tier, io.engine, data.format, device, collectives, model.arch,
// model.rope_scaling.type, optim.speculation), parsed once into enums: everything past
// parse_config switches on the enum, and the name of each value is written here only
// (enum_names).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "core/format.h"
#include "core/status.h"

namespace strata {

enum class Schedule : uint8_t { in_memory, horizontal, vertical };  // train.schedule
// train.precision: the working weights' element type (Note [Precision modes] in
// train/trainer.h); master weights, moments, gradients and compute are f32 in both.
enum class Precision : uint8_t { f32, bf16 };
// train.matmul: the element type of the blocks' GEMM operands (Note [bf16 GEMMs] in
// model/block.h); bf16 needs train.precision bf16.
enum class MatmulPrecision : uint8_t { f32, bf16 };
// activations.policy as the user sets it; the plan's per-block decision is ActPolicy
// (sched/schedule_spec.h), which "offload" and "auto" resolve to.
enum class ActsMode : uint8_t { recompute, keep, offload, automatic };
enum class ActsTier : uint8_t { storage, host };                  // activations.tier
enum class IoEngineKind : uint8_t { automatic, uring, posix };    // io.engine
enum class TokenFormat : uint8_t { auto_detect, llmc, raw_u16 };  // data.format
// device. cpu_discrete: the CPU computing as a discrete device would (backend.h).
enum class DeviceKind : uint8_t { cpu, cuda, cpu_discrete };
// collectives: where a data-parallel run's gradients are summed (Note [Collectives on device
// memory] in dist/device_collectives.h).
enum class CollectivesPlace : uint8_t { automatic, host, device };
enum class ModelArch : uint8_t { gpt2, llama };           // model.arch
enum class RopeScalingKind : uint8_t { none, llama3 };    // model.rope_scaling.type
enum class Speculation : uint8_t { automatic, on, off };  // optim.speculation

// Each value with its config name.
template <typename E, size_t N>
using EnumNames = std::array<std::pair<E, const char*>, N>;
constexpr EnumNames<Schedule, 3> enum_names(Schedule) {
  return {{{Schedule::in_memory, "in_memory"},
           {Schedule::horizontal, "horizontal"},
           {Schedule::vertical, "vertical"}}};
}
constexpr EnumNames<Precision, 2> enum_names(Precision) {
  return {{{Precision::f32, "f32"}, {Precision::bf16, "bf16"}}};
}
constexpr EnumNames<MatmulPrecision, 2> enum_names(MatmulPrecision) {
  return {{{MatmulPrecision::f32, "f32"}, {MatmulPrecision::bf16, "bf16"}}};
}
constexpr EnumNames<ActsMode, 4> enum_names(ActsMode) {
  return {{{ActsMode::recompute, "recompute"},
           {ActsMode::keep, "keep"},
           {ActsMode::offload, "offload"},
           {ActsMode::automatic, "auto"}}};
}
constexpr EnumNames<ActsTier, 2> enum_names(ActsTier) {
  return {{{ActsTier::storage, "storage"}, {ActsTier::host, "host"}}};
}
constexpr EnumNames<IoEngineKind, 3> enum_names(IoEngineKind) {
  return {{{IoEngineKind::automatic, "auto"},
           {IoEngineKind::uring, "uring"},
           {IoEngineKind::posix, "posix"}}};
}
constexpr EnumNames<TokenFormat, 3> enum_names(TokenFormat) {
  return {{{TokenFormat::auto_detect, "auto"},
           {TokenFormat::llmc, "llmc"},
           {TokenFormat::raw_u16, "raw_u16"}}};
}
constexpr EnumNames<DeviceKind, 3> enum_names(DeviceKind) {
  return {{{DeviceKind::cpu, "cpu"},
           {DeviceKind::cuda, "cuda"},
           {DeviceKind::cpu_discrete, "cpu-discrete"}}};
}
constexpr EnumNames<CollectivesPlace, 3> enum_names(CollectivesPlace) {
  return {{{CollectivesPlace::automatic, "auto"},
           {CollectivesPlace::host, "host"},
           {CollectivesPlace::device, "device"}}};
}

constexpr EnumNames<ModelArch, 2> enum_names(ModelArch) {
  return {{{ModelArch::gpt2, "gpt2"}, {ModelArch::llama, "llama"}}};
}
constexpr EnumNames<RopeScalingKind, 2> enum_names(RopeScalingKind) {
  return {{{RopeScalingKind::none, "none"}, {RopeScalingKind::llama3, "llama3"}}};
}
constexpr EnumNames<Speculation, 3> enum_names(Speculation) {
  return {{{Speculation::automatic, "auto"}, {Speculation::on, "on"}, {Speculation::off, "off"}}};
}

// The config's name of a value ("in_memory", "auto", "raw_u16", ...).
template <typename E>
const char* enum_name(E v) {
  for (const auto& [value, name] : enum_names(E{})) {
    if (value == v) return name;
  }
  return "?";
}

// The value named `text`, or invalid_argument naming `field` and every choice, e.g.
// "train.schedule 'diagonal' is not one of in_memory, horizontal, vertical".
template <typename E>
Result<E> parse_enum(std::string_view field, std::string_view text) {
  std::string choices;
  for (const auto& [value, name] : enum_names(E{})) {
    if (text == name) return value;
    choices += (choices.empty() ? "" : ", ") + std::string(name);
  }
  return invalid_argument(std::string(field) + " '" + printable(text) + "' is not one of " +
                          choices);
}

// Whether a schedule streams state through a plan (horizontal, vertical).
inline bool is_offloaded(Schedule s) {
  return s != Schedule::in_memory;
}

}  // namespace strata
