#include "planner/profile.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "core/config.h"

namespace strata {

using nlohmann::json;

double rate_at(const RateTable& t, double tokens) {
  if (t.empty()) return 0;
  if (tokens <= t.front().first) return t.front().second;
  if (tokens >= t.back().first) return t.back().second;
  for (size_t i = 1; i < t.size(); ++i) {
    if (tokens <= t[i].first) {
      const double x0 = std::log(t[i - 1].first), x1 = std::log(t[i].first);
      const double f = (std::log(tokens) - x0) / std::max(x1 - x0, 1e-12);
      return t[i - 1].second + f * (t[i].second - t[i - 1].second);
    }
  }
  return t.back().second;
}

double HardwareProfile::storage_read_bytes_per_s() const {
  double r = 0;
  for (const StorageDir& d : storage_dirs) r += d.read_bytes_per_s;
  return r;
}
double HardwareProfile::storage_write_bytes_per_s() const {
  double r = 0;
  for (const StorageDir& d : storage_dirs) r += d.write_bytes_per_s;
  return r;
}
int64_t HardwareProfile::storage_capacity_bytes() const {
  int64_t c = 0;
  for (const StorageDir& d : storage_dirs) {
    if (d.capacity_bytes <= 0) return 0;
    c += d.capacity_bytes;
  }
  return c;
}

namespace {

// Reads the fields of one JSON object, refusing unknown keys and wrong types with one line
// naming the field.
class Reader {
 public:
  Reader(const json& j, std::string where, const std::string& src)
      : j_(j), where_(std::move(where)), src_(src) {}

  Status check_object() const {
    if (!j_.is_object()) return err("", "must be an object");
    return {};
  }
  Status unknown_keys(std::initializer_list<const char*> known) const {
    std::set<std::string> k(known.begin(), known.end());
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (!k.count(it.key())) return err(it.key(), "is not a known field");
    }
    return {};
  }
  template <typename T>
  Status number(const char* key, T& out, bool positive = false, bool required = false) const {
    if (!j_.contains(key)) return required ? err(key, "is missing") : Status();
    const json& v = j_.at(key);
    if (!v.is_number()) return err(key, "must be a number");
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < 0 || (positive && d <= 0)) {
      return err(key, positive ? "must be > 0" : "must be >= 0");
    }
    out = static_cast<T>(d);
    return {};
  }
  Status string(const char* key, std::string& out) const {
    if (!j_.contains(key)) return {};
    if (!j_.at(key).is_string()) return err(key, "must be a string");
    out = j_.at(key).get<std::string>();
    return {};
  }
  Status boolean(const char* key, bool& out) const {
    if (!j_.contains(key)) return {};
    if (!j_.at(key).is_boolean()) return err(key, "must be true or false");
    out = j_.at(key).get<bool>();
    return {};
  }
  // [[tokens, value], ...] with both > 0; `value` names the second column in errors.
  Status table(const char* key, RateTable& out, const char* value = "flops_per_s",
               bool required = true) const {
    if (!j_.contains(key)) return required ? err(key, "is missing") : Status();
    const json& v = j_.at(key);
    if (!v.is_array() || v.empty()) {
      return err(key, std::string("must be a non-empty array of [tokens, ") + value + "]");
    }
    out.clear();
    for (const json& p : v) {
      if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number() ||
          !std::isfinite(p[0].get<double>()) || !std::isfinite(p[1].get<double>()) ||
          p[0].get<double>() <= 0 || p[1].get<double>() <= 0) {
        return err(key, std::string("entries must be [tokens > 0, ") + value + " > 0]");
      }
      out.emplace_back(p[0].get<double>(), p[1].get<double>());
    }
    std::sort(out.begin(), out.end());
    return {};
  }
  const json& at(const char* key) const { return j_.at(key); }
  bool has(const char* key) const { return j_.contains(key); }
  Status err(const std::string& key, const std::string& what) const {
    return invalid_argument("profile " + src_ + ": " + where_ + (key.empty() ? "" : "." + key) +
                            " " + what);
  }

 private:
  const json& j_;
  std::string where_;
  const std::string& src_;
};

}  // namespace

namespace {

// One section of a profile, read into p by a Reader positioned on it (src names the file).
Status read_dtype(Reader& r, const std::string& /*src*/, HardwareProfile& p) {
  STRATA_RETURN_IF_ERROR(r.unknown_keys({"param_bytes", "grad_bytes", "optim_bytes", "act_bytes"}));
  STRATA_RETURN_IF_ERROR(r.number("param_bytes", p.param_bytes, true));
  STRATA_RETURN_IF_ERROR(r.number("grad_bytes", p.grad_bytes, true));
  STRATA_RETURN_IF_ERROR(r.number("optim_bytes", p.optim_bytes, true));
  return r.number("act_bytes", p.act_bytes, true);
}

Status read_gemm_samples(Reader& r, const std::string& src, HardwareProfile& p) {
  if (!r.has("gemm")) return Status::ok_status();
  if (!r.at("gemm").is_array()) return r.err("gemm", "must be an array");
  for (const json& g : r.at("gemm")) {
    Reader gr(g, "compute.gemm[]", src);
    STRATA_RETURN_IF_ERROR(gr.check_object());
    STRATA_RETURN_IF_ERROR(gr.unknown_keys({"m", "n", "k", "flops_per_s"}));
    GemmSample s;
    STRATA_RETURN_IF_ERROR(gr.number("m", s.m, true, true));
    STRATA_RETURN_IF_ERROR(gr.number("n", s.n, true, true));
    STRATA_RETURN_IF_ERROR(gr.number("k", s.k, true, true));
    STRATA_RETURN_IF_ERROR(gr.number("flops_per_s", s.flops_per_s, true, true));
    p.gemm.push_back(s);
  }
  return Status::ok_status();
}

Status read_compute(Reader& r, const std::string& src, HardwareProfile& p) {
  STRATA_RETURN_IF_ERROR(r.unknown_keys(
      {"block_fwd", "block_bwd", "head", "block_fwd_reuse", "block_bwd_reuse", "embed_s_per_token",
       "memset_bytes_per_s", "task_overhead_s", "attention", "gemm"}));
  STRATA_RETURN_IF_ERROR(r.table("block_fwd", p.block_fwd));
  STRATA_RETURN_IF_ERROR(r.table("block_bwd", p.block_bwd));
  STRATA_RETURN_IF_ERROR(r.table("head", p.head));
  STRATA_RETURN_IF_ERROR(r.table("block_fwd_reuse", p.block_fwd_reuse, "speedup", false));
  STRATA_RETURN_IF_ERROR(r.table("block_bwd_reuse", p.block_bwd_reuse, "speedup", false));
  STRATA_RETURN_IF_ERROR(r.number("embed_s_per_token", p.embed_s_per_token));
  STRATA_RETURN_IF_ERROR(r.number("memset_bytes_per_s", p.memset_bytes_per_s, true));
  STRATA_RETURN_IF_ERROR(r.number("task_overhead_s", p.task_overhead_s));
  std::string att = "materialized";
  STRATA_RETURN_IF_ERROR(r.string("attention", att));
  if (att != "flash" && att != "materialized") {
    return r.err("attention", "must be \"flash\" or \"materialized\", got '" + att + "'");
  }
  p.flash_attention = att == "flash";
  return read_gemm_samples(r, src, p);
}

Status read_link(Reader& r, const std::string& /*src*/, HardwareProfile& p) {
  STRATA_RETURN_IF_ERROR(r.unknown_keys({"h2d_bytes_per_s", "d2h_bytes_per_s", "latency_s"}));
  STRATA_RETURN_IF_ERROR(r.number("h2d_bytes_per_s", p.h2d_bytes_per_s, true, true));
  STRATA_RETURN_IF_ERROR(r.number("d2h_bytes_per_s", p.d2h_bytes_per_s, true, true));
  return r.number("latency_s", p.link_latency_s);
}

Status read_network(Reader& r, const std::string& /*src*/, HardwareProfile& p) {
  STRATA_RETURN_IF_ERROR(r.unknown_keys({"bytes_per_s", "latency_s"}));
  STRATA_RETURN_IF_ERROR(r.number("bytes_per_s", p.net_bytes_per_s, true, true));
  p.has_network = true;
  return r.number("latency_s", p.net_latency_s);
}

Status read_storage(Reader& r, const std::string& src, HardwareProfile& p) {
  STRATA_RETURN_IF_ERROR(r.unknown_keys({"dirs", "latency_s"}));
  STRATA_RETURN_IF_ERROR(r.number("latency_s", p.storage_latency_s));
  if (!r.has("dirs") || !r.at("dirs").is_array() || r.at("dirs").empty()) {
    return r.err("dirs", "must be a non-empty array");
  }
  for (const json& d : r.at("dirs")) {
    Reader dr(d, "storage.dirs[]", src);
    STRATA_RETURN_IF_ERROR(dr.check_object());
    STRATA_RETURN_IF_ERROR(
        dr.unknown_keys({"path", "read_bytes_per_s", "write_bytes_per_s", "capacity_bytes"}));
    StorageDir sd;
    STRATA_RETURN_IF_ERROR(dr.string("path", sd.path));
    STRATA_RETURN_IF_ERROR(dr.number("read_bytes_per_s", sd.read_bytes_per_s, true, true));
    STRATA_RETURN_IF_ERROR(dr.number("write_bytes_per_s", sd.write_bytes_per_s, true, true));
    STRATA_RETURN_IF_ERROR(dr.number("capacity_bytes", sd.capacity_bytes));
    p.storage_dirs.push_back(sd);
  }
  return Status::ok_status();
}

Status read_cpu_optimizer(Reader& r, const std::string& /*src*/, HardwareProfile& p) {
  STRATA_RETURN_IF_ERROR(r.unknown_keys({"params_per_s", "reduce_bytes_per_s", "latency_s"}));
  STRATA_RETURN_IF_ERROR(r.number("params_per_s", p.optim_params_per_s, true, true));
  STRATA_RETURN_IF_ERROR(r.number("reduce_bytes_per_s", p.reduce_bytes_per_s, true));
  return r.number("latency_s", p.optim_latency_s);
}

// A pace in (0, 1].
Status speed(Reader& r, const char* key, double& out) {
  STRATA_RETURN_IF_ERROR(r.number(key, out, true));
  if (out > 1) return r.err(key, "must be in (0, 1]");
  return Status::ok_status();
}

Status read_cores(Reader& r, const std::string& /*src*/, HardwareProfile& p) {
  STRATA_RETURN_IF_ERROR(
      r.unknown_keys({"shared", "shared_speed", "compute_speed", "optim_speed", "io_s_per_byte"}));
  STRATA_RETURN_IF_ERROR(r.boolean("shared", p.shared_cores));
  // "shared_speed" (the older, symmetric form) sets both; the specific keys win.
  STRATA_RETURN_IF_ERROR(speed(r, "shared_speed", p.compute_shared_speed));
  p.optim_shared_speed = p.compute_shared_speed;
  STRATA_RETURN_IF_ERROR(speed(r, "compute_speed", p.compute_shared_speed));
  STRATA_RETURN_IF_ERROR(speed(r, "optim_speed", p.optim_shared_speed));
  return r.number("io_s_per_byte", p.io_s_per_byte);
}

Status read_capacity(Reader& r, const std::string& /*src*/, HardwareProfile& p) {
  STRATA_RETURN_IF_ERROR(r.unknown_keys({"device_bytes", "host_bytes"}));
  STRATA_RETURN_IF_ERROR(r.number("device_bytes", p.device_bytes));
  return r.number("host_bytes", p.host_bytes);
}

Status read_sources(const json& j, const std::string& src, HardwareProfile& p) {
  if (!j.contains("sources")) return Status::ok_status();
  if (!j["sources"].is_object()) {
    return invalid_argument("profile " + src + ": sources must be an object");
  }
  for (auto it = j["sources"].begin(); it != j["sources"].end(); ++it) {
    if (!it.value().is_string()) {
      return invalid_argument("profile " + src + ": sources." + it.key() + " must be a string");
    }
    p.sources[it.key()] = it.value().get<std::string>();
  }
  return Status::ok_status();
}

Status read_measurement(Reader& r, const std::string& /*src*/, HardwareProfile& p) {
  ProfileMeasurement& m = p.measurement;
  STRATA_RETURN_IF_ERROR(r.unknown_keys(
      {"rounds", "load_before", "other_cpu", "steal", "samples", "rejected", "round_spread"}));
  STRATA_RETURN_IF_ERROR(r.number("rounds", m.rounds));
  STRATA_RETURN_IF_ERROR(r.number("load_before", m.load_before));
  STRATA_RETURN_IF_ERROR(r.number("other_cpu", m.other_cpu));
  STRATA_RETURN_IF_ERROR(r.number("steal", m.steal));
  STRATA_RETURN_IF_ERROR(r.number("samples", m.samples));
  STRATA_RETURN_IF_ERROR(r.number("rejected", m.rejected));
  return r.number("round_spread", m.round_spread);
}

// The profile's sections in the order they are read (and errors reported).
struct Section {
  const char* key;
  bool required;
  Status (*read)(Reader&, const std::string&, HardwareProfile&);
};
const Section kSections[] = {
    {"dtype", false, read_dtype},
    {"compute", true, read_compute},
    {"link", true, read_link},
    {"storage", true, read_storage},
    {"cpu_optimizer", true, read_cpu_optimizer},
    {"network", false, read_network},
    {"cores", false, read_cores},
    {"capacity", false, read_capacity},
    {"measurement", false, read_measurement},
};

}  // namespace

Result<HardwareProfile> profile_from_json(const json& j, const std::string& src) {
  HardwareProfile p;
  if (!j.is_object()) return invalid_argument("profile " + src + ": must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    static const std::set<std::string> known = {
        "name",          "description", "dtype",    "compute", "link",        "storage",
        "cpu_optimizer", "cores",       "capacity", "sources", "measurement", "network"};
    if (!known.count(it.key())) {
      return invalid_argument("profile " + src + ": " + it.key() + " is not a known field");
    }
  }
  if (j.contains("name") && j["name"].is_string()) p.name = j["name"];
  if (j.contains("description") && j["description"].is_string()) p.description = j["description"];
  for (const Section& s : kSections) {
    if (!j.contains(s.key)) {
      if (s.required) return invalid_argument("profile " + src + ": " + s.key + " is missing");
      continue;
    }
    if (!j.at(s.key).is_object()) {
      return invalid_argument("profile " + src + ": " + std::string(s.key) + " must be an object");
    }
    Reader r(j.at(s.key), s.key, src);
    STRATA_RETURN_IF_ERROR(s.read(r, src, p));
  }
  STRATA_RETURN_IF_ERROR(read_sources(j, src, p));
  return p;
}

Result<HardwareProfile> load_profile(const std::string& path) {
  auto j = read_json_file(path);
  if (!j.ok()) return Status(j.status().code(), "profile " + path + ": " + j.status().message());
  return profile_from_json(*j, path);
}

json profile_to_json(const HardwareProfile& p) {
  auto table = [](const RateTable& t) {
    json a = json::array();
    for (auto [x, y] : t) a.push_back({x, y});
    return a;
  };
  json gemm = json::array();
  for (const GemmSample& g : p.gemm) {
    gemm.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"flops_per_s", g.flops_per_s}});
  }
  json dirs = json::array();
  for (const StorageDir& d : p.storage_dirs) {
    dirs.push_back({{"path", d.path},
                    {"read_bytes_per_s", d.read_bytes_per_s},
                    {"write_bytes_per_s", d.write_bytes_per_s},
                    {"capacity_bytes", d.capacity_bytes}});
  }
  json j = {
      {"name", p.name},
      {"description", p.description},
      {"dtype",
       {{"param_bytes", p.param_bytes},
        {"grad_bytes", p.grad_bytes},
        {"optim_bytes", p.optim_bytes},
        {"act_bytes", p.act_bytes}}},
      {"compute",
       {{"block_fwd", table(p.block_fwd)},
        {"block_bwd", table(p.block_bwd)},
        {"head", table(p.head)},
        {"embed_s_per_token", p.embed_s_per_token},
        {"memset_bytes_per_s", p.memset_bytes_per_s},
        {"task_overhead_s", p.task_overhead_s},
        {"attention", p.flash_attention ? "flash" : "materialized"},
        {"gemm", gemm}}},
      {"link",
       {{"h2d_bytes_per_s", p.h2d_bytes_per_s},
        {"d2h_bytes_per_s", p.d2h_bytes_per_s},
        {"latency_s", p.link_latency_s}}},
      {"storage", {{"dirs", dirs}, {"latency_s", p.storage_latency_s}}},
      {"cpu_optimizer",
       {{"params_per_s", p.optim_params_per_s},
        {"reduce_bytes_per_s", p.reduce_bytes_per_s},
        {"latency_s", p.optim_latency_s}}},
      {"cores",
       {{"shared", p.shared_cores},
        {"compute_speed", p.compute_shared_speed},
        {"optim_speed", p.optim_shared_speed},
        {"io_s_per_byte", p.io_s_per_byte}}},
      {"capacity", {{"device_bytes", p.device_bytes}, {"host_bytes", p.host_bytes}}},
  };
  if (p.has_network) {
    j["network"] = {{"bytes_per_s", p.net_bytes_per_s}, {"latency_s", p.net_latency_s}};
  }
  if (!p.block_fwd_reuse.empty()) j["compute"]["block_fwd_reuse"] = table(p.block_fwd_reuse);
  if (!p.block_bwd_reuse.empty()) j["compute"]["block_bwd_reuse"] = table(p.block_bwd_reuse);
  const ProfileMeasurement& m = p.measurement;
  if (m.rounds > 0) {
    j["measurement"] = {{"rounds", m.rounds},
                        {"load_before", m.load_before},
                        {"other_cpu", m.other_cpu},
                        {"steal", m.steal},
                        {"samples", m.samples},
                        {"rejected", m.rejected},
                        {"round_spread", m.round_spread}};
  }
  json s = json::object();
  for (const auto& [k, v] : p.sources) s[k] = v;
  j["sources"] = s;
  return j;
}

}  // namespace strata
