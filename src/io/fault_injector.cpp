#include "io/fault_injector.h"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <thread>

#include "core/check.h"
#include "core/format.h"
#include "core/rng.h"

namespace strata {

namespace {

bool op_matches(FaultOp op, IoOp actual) {
  return op == FaultOp::any || (op == FaultOp::read) == (actual == IoOp::read);
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    parts.push_back(trim(s.substr(start, pos == std::string::npos ? pos : pos - start)));
    if (pos == std::string::npos) return parts;
    start = pos + 1;
  }
}

bool parse_uint(const std::string& s, uint64_t& out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

bool parse_probability(const std::string& s, double& out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && std::isfinite(out) && out >= 0 &&
         out <= 1;
}

const char* kind_name(FaultKind kind) {
  switch (kind) {
    case FaultKind::eio:
      return "eio";
    case FaultKind::enospc:
      return "enospc";
    case FaultKind::short_transfer:
      return "short";
    case FaultKind::eintr:
      return "eintr";
    case FaultKind::eagain:
      return "eagain";
    case FaultKind::delay:
      return "delay_us";
  }
  return "?";
}

int64_t errno_of(FaultKind kind) {
  switch (kind) {
    case FaultKind::eio:
      return EIO;
    case FaultKind::enospc:
      return ENOSPC;
    case FaultKind::eintr:
      return EINTR;
    case FaultKind::eagain:
      return EAGAIN;
    default:
      return 0;
  }
}

}  // namespace

std::string fault_rule_to_string(const FaultRule& rule) {
  std::string s = rule.op == FaultOp::read ? "read" : rule.op == FaultOp::write ? "write" : "any";
  s += ':';
  switch (rule.which) {
    case FaultWhich::nth:
      s += std::to_string(rule.nth);
      break;
    case FaultWhich::probability: {
      char buf[32];
      auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), rule.probability);
      STRATA_CHECK(ec == std::errc());
      s += 'p' + std::string(buf, end);
      break;
    }
    case FaultWhich::every:
      s += '*';
      break;
  }
  s += ':';
  s += kind_name(rule.kind);
  if (rule.kind == FaultKind::delay) s += '=' + std::to_string(rule.delay_us);
  return s;
}

FaultInjector::FaultInjector(std::vector<FaultRule> rules, uint64_t seed)
    : rules_(std::move(rules)), state_(rules_.size()) {
  // Each rule draws from its own stream so that adding a rule does not shift the others' draws.
  for (size_t i = 0; i < state_.size(); i++) state_[i].rng = Rng(derive_seed(seed, i));
}

int64_t FaultInjector::on_result(const IoRequest& request, uint64_t done, int attempt,
                                 int64_t result) {
  if (attempt != 0) return result;
  uint64_t delay_us = 0;
  int64_t out = result;
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < rules_.size(); i++) {
      const FaultRule& rule = rules_[i];
      RuleState& st = state_[i];
      if (!op_matches(rule.op, request.op)) continue;
      uint64_t index = st.matched++;
      bool hit = false;
      switch (rule.which) {
        case FaultWhich::nth:
          hit = index == rule.nth;
          break;
        case FaultWhich::every:
          hit = true;
          break;
        case FaultWhich::probability:
          // 53 random bits -> [0, 1); drawn for every matching request so the sequence of
          // decisions depends only on the seed and the order of requests.
          hit = static_cast<double>(st.rng.next_u64() >> 11) * 0x1.0p-53 < rule.probability;
          break;
      }
      if (!hit) continue;
      if (rule.kind == FaultKind::delay) {
        delay_us += rule.delay_us;
        st.fired++;
        continue;
      }
      if (changed || result < 0) continue;  // first changing rule wins; real errors stay
      if (rule.kind == FaultKind::short_transfer) {
        uint64_t half = static_cast<uint64_t>(result) / 2;
        if (request.file != nullptr && request.file->direct) half -= half % kDirectIoAlignment;
        if (half == 0) continue;  // too small to shorten: see the grammar note
        out = static_cast<int64_t>(half);
      } else {
        out = -errno_of(rule.kind);
      }
      changed = true;
      st.fired++;
    }
  }
  if (delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  return out;
}

uint64_t FaultInjector::matched(size_t rule) const {
  std::lock_guard<std::mutex> lock(mu_);
  STRATA_CHECK(rule < state_.size());
  return state_[rule].matched;
}

uint64_t FaultInjector::fired(size_t rule) const {
  std::lock_guard<std::mutex> lock(mu_);
  STRATA_CHECK(rule < state_.size());
  return state_[rule].fired;
}

uint64_t FaultInjector::total_fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const auto& st : state_) n += st.fired;
  return n;
}

Result<std::shared_ptr<FaultInjector>> parse_fault_spec(const std::string& spec) {
  if (trim(spec).empty()) return invalid_argument("fault spec is empty");
  std::vector<FaultRule> rules;
  uint64_t seed = 1;
  std::vector<std::string> items = split(spec, ',');
  for (size_t n = 0; n < items.size(); n++) {
    const std::string& item = items[n];
    std::string where = "fault spec item " + std::to_string(n + 1) + " '" + excerpt(item) + "'";
    if (item.rfind("seed=", 0) == 0) {
      if (!parse_uint(item.substr(5), seed)) {
        return invalid_argument(where + ": '" + excerpt(item.substr(5)) +
                                "' is not an unsigned integer");
      }
      continue;
    }
    std::vector<std::string> f = split(item, ':');
    if (f.size() != 3) {
      return invalid_argument(where + ": expected op:which:kind (e.g. write:3:eio)");
    }
    FaultRule rule;
    if (f[0] == "read") {
      rule.op = FaultOp::read;
    } else if (f[0] == "write") {
      rule.op = FaultOp::write;
    } else if (f[0] == "any") {
      rule.op = FaultOp::any;
    } else {
      return invalid_argument(where + ": '" + excerpt(f[0]) + "' is not read, write or any");
    }
    if (f[1] == "*") {
      rule.which = FaultWhich::every;
    } else if (!f[1].empty() && f[1][0] == 'p') {
      rule.which = FaultWhich::probability;
      if (!parse_probability(f[1].substr(1), rule.probability)) {
        return invalid_argument(where + ": '" + excerpt(f[1]) +
                                "' is not p<probability in [0, 1]>");
      }
    } else {
      rule.which = FaultWhich::nth;
      if (!parse_uint(f[1], rule.nth)) {
        return invalid_argument(where + ": '" + excerpt(f[1]) +
                                "' is not a request number, 'p<probability>' or '*'");
      }
    }
    const std::string& k = f[2];
    if (k == "eio") {
      rule.kind = FaultKind::eio;
    } else if (k == "enospc") {
      rule.kind = FaultKind::enospc;
    } else if (k == "short") {
      rule.kind = FaultKind::short_transfer;
    } else if (k == "eintr") {
      rule.kind = FaultKind::eintr;
    } else if (k == "eagain") {
      rule.kind = FaultKind::eagain;
    } else if (k.rfind("delay_us=", 0) == 0) {
      rule.kind = FaultKind::delay;
      if (!parse_uint(k.substr(9), rule.delay_us)) {
        return invalid_argument(where + ": '" + excerpt(k.substr(9)) +
                                "' is not a delay in microseconds");
      }
    } else {
      return invalid_argument(where + ": '" + excerpt(k) +
                              "' is not eio, enospc, short, eintr, eagain or delay_us=N");
    }
    rules.push_back(rule);
  }
  if (rules.empty()) return invalid_argument("fault spec '" + excerpt(spec) + "' has no rules");
  return std::make_shared<FaultInjector>(std::move(rules), seed);
}

}  // namespace strata
