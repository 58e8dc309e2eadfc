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

#include "core/format.h"
#include "core/status.h"

namespace strata {

// Each enum counts from 0, and enum_names(E{}) lists its values' config names in that order: the
// name of value v is enum_names(E{})[v].
enum class Schedule : uint8_t { in_memory, horizontal, vertical };  // train.schedule
constexpr auto enum_names(Schedule) {
  return std::array{"in_memory", "horizontal", "vertical"};
}

// train.precision: the working weights' element type (Note [Precision modes] in
// train/trainer.h); master weights, moments, gradients and compute are f32 in both.
enum class Precision : uint8_t { f32, bf16 };
constexpr auto enum_names(Precision) {
  return std::array{"f32", "bf16"};
}

// train.matmul: the element type of the blocks' GEMM operands (Note [bf16 GEMMs] in
// model/block.h); bf16 needs train.precision bf16.
enum class MatmulPrecision : uint8_t { f32, bf16 };
constexpr auto enum_names(MatmulPrecision) {
  return std::array{"f32", "bf16"};
}

// activations.policy as the user sets it; the plan's per-block decision is ActPolicy
// (sched/schedule_spec.h), which "offload" and "auto" resolve to.
enum class ActsMode : uint8_t { recompute, keep, offload, automatic };
constexpr auto enum_names(ActsMode) {
  return std::array{"recompute", "keep", "offload", "auto"};
}

enum class ActsTier : uint8_t { storage, host };  // activations.tier
constexpr auto enum_names(ActsTier) {
  return std::array{"storage", "host"};
}

enum class IoEngineKind : uint8_t { automatic, uring, posix };  // io.engine
constexpr auto enum_names(IoEngineKind) {
  return std::array{"auto", "uring", "posix"};
}

enum class TokenFormat : uint8_t { auto_detect, llmc, raw_u16 };  // data.format
constexpr auto enum_names(TokenFormat) {
  return std::array{"auto", "llmc", "raw_u16"};
}

// device. cpu_discrete: the CPU computing as a discrete device would (backend.h).
enum class DeviceKind : uint8_t { cpu, cuda, cpu_discrete };
constexpr auto enum_names(DeviceKind) {
  return std::array{"cpu", "cuda", "cpu-discrete"};
}

// collectives: where a data-parallel run's gradients are summed (Note [Collectives on device
// memory] in dist/device_collectives.h).
enum class CollectivesPlace : uint8_t { automatic, host, device };
constexpr auto enum_names(CollectivesPlace) {
  return std::array{"auto", "host", "device"};
}

enum class ModelArch : uint8_t { gpt2, llama };  // model.arch
constexpr auto enum_names(ModelArch) {
  return std::array{"gpt2", "llama"};
}

enum class RopeScalingKind : uint8_t { none, llama3 };  // model.rope_scaling.type
constexpr auto enum_names(RopeScalingKind) {
  return std::array{"none", "llama3"};
}

// lora.base_precision: how a LoRA run keeps its frozen base (Note [LoRA] in model/lora.h).
enum class BasePrecision : uint8_t { automatic, bf16, int8, nf4 };
constexpr auto enum_names(BasePrecision) {
  return std::array{"auto", "bf16", "int8", "nf4"};
}

enum class Speculation : uint8_t { automatic, on, off };  // optim.speculation
constexpr auto enum_names(Speculation) {
  return std::array{"auto", "on", "off"};
}

// The config's name of a value ("in_memory", "auto", "raw_u16", ...).
template <typename E>
const char* enum_name(E v) {
  constexpr auto names = enum_names(E{});
  const auto i = static_cast<size_t>(v);
  return i < names.size() ? names[i] : "?";
}

// The value named `text`, or invalid_argument naming `field` and every choice, e.g.
// "train.schedule 'diagonal' is not one of in_memory, horizontal, vertical".
template <typename E>
Result<E> parse_enum(std::string_view field, std::string_view text) {
  std::string choices;
  constexpr auto names = enum_names(E{});
  for (size_t i = 0; i < names.size(); i++) {
    if (text == names[i]) return static_cast<E>(i);
    choices += (choices.empty() ? "" : ", ") + std::string(names[i]);
  }
  return invalid_argument(std::string(field) + " '" + excerpt(text) + "' is not one of " + choices);
}

// Whether a schedule streams state through a plan (horizontal, vertical).
inline bool is_offloaded(Schedule s) {
  return s != Schedule::in_memory;
}

}  // namespace strata
