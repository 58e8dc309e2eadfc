#include "core/config_enums.h"

#include <array>
#include <utility>

#include "core/format.h"

namespace strata {

namespace {

template <typename E, size_t N>
using Names = std::array<std::pair<E, const char*>, N>;

constexpr Names<Schedule, 3> kSchedules = {{{Schedule::in_memory, "in_memory"},
                                            {Schedule::horizontal, "horizontal"},
                                            {Schedule::vertical, "vertical"}}};
constexpr Names<ActsPolicy, 4> kActsPolicies = {{{ActsPolicy::recompute, "recompute"},
                                                 {ActsPolicy::keep, "keep"},
                                                 {ActsPolicy::offload, "offload"},
                                                 {ActsPolicy::automatic, "auto"}}};
constexpr Names<ActsTier, 2> kActsTiers = {
    {{ActsTier::storage, "storage"}, {ActsTier::host, "host"}}};
constexpr Names<IoEngineKind, 3> kIoEngines = {{{IoEngineKind::automatic, "auto"},
                                                {IoEngineKind::uring, "uring"},
                                                {IoEngineKind::posix, "posix"}}};
constexpr Names<TokenFormat, 3> kTokenFormats = {{{TokenFormat::auto_detect, "auto"},
                                                  {TokenFormat::llmc, "llmc"},
                                                  {TokenFormat::raw_u16, "raw_u16"}}};
constexpr Names<DeviceKind, 2> kDevices = {{{DeviceKind::cpu, "cpu"}, {DeviceKind::cuda, "cuda"}}};

constexpr const auto& names_of(Schedule) {
  return kSchedules;
}
constexpr const auto& names_of(ActsPolicy) {
  return kActsPolicies;
}
constexpr const auto& names_of(ActsTier) {
  return kActsTiers;
}
constexpr const auto& names_of(IoEngineKind) {
  return kIoEngines;
}
constexpr const auto& names_of(TokenFormat) {
  return kTokenFormats;
}
constexpr const auto& names_of(DeviceKind) {
  return kDevices;
}

template <typename E>
const char* name_in_table(E v) {
  for (const auto& [value, name] : names_of(E{})) {
    if (value == v) return name;
  }
  return "?";
}

}  // namespace

const char* enum_name(Schedule v) {
  return name_in_table(v);
}
const char* enum_name(ActsPolicy v) {
  return name_in_table(v);
}
const char* enum_name(ActsTier v) {
  return name_in_table(v);
}
const char* enum_name(IoEngineKind v) {
  return name_in_table(v);
}
const char* enum_name(TokenFormat v) {
  return name_in_table(v);
}
const char* enum_name(DeviceKind v) {
  return name_in_table(v);
}

template <typename E>
Result<E> parse_enum(std::string_view field, std::string_view text) {
  std::string choices;
  for (const auto& [value, name] : names_of(E{})) {
    if (text == name) return value;
    choices += (choices.empty() ? "" : ", ") + std::string(name);
  }
  return invalid_argument(std::string(field) + " '" + printable(text) + "' is not one of " +
                          choices);
}

template Result<Schedule> parse_enum<Schedule>(std::string_view, std::string_view);
template Result<ActsPolicy> parse_enum<ActsPolicy>(std::string_view, std::string_view);
template Result<ActsTier> parse_enum<ActsTier>(std::string_view, std::string_view);
template Result<IoEngineKind> parse_enum<IoEngineKind>(std::string_view, std::string_view);
template Result<TokenFormat> parse_enum<TokenFormat>(std::string_view, std::string_view);
template Result<DeviceKind> parse_enum<DeviceKind>(std::string_view, std::string_view);

}  // namespace strata
