// A configurable IoFaultHook (io_engine.h): turns chosen completions into EIO, ENOSPC, short
// transfers, EINTR, EAGAIN, or delays them, so tests and `strata train --set io.faults=...` can
// exercise the engines' real error and resubmission paths (Note [Every completion is checked]).
//
// What a "request" is here: each call of on_result with attempt == 0, i.e. the first result of
// every piece the engine submits (one per block when it splits a large request). Resubmissions
// (attempt > 0) always pass through unchanged, so a retryable fault (eintr, eagain, short) is
// followed by a clean retry and the engine always makes progress.
//
// Spec grammar (parse_fault_spec), items separated by commas, spaces around tokens ignored:
//   spec  := item (',' item)*
//   item  := rule | 'seed=' UINT          seed of the probability draws (default 1)
//   rule  := op ':' which ':' kind
//   op    := 'read' | 'write' | 'any'
//   which := UINT                         the Nth matching request, counting from 0
//          | 'p' FLOAT                    each matching request with probability FLOAT in [0, 1]
//          | '*'                          every matching request
//   kind  := 'eio' | 'enospc' | 'eintr' | 'eagain'   fail with that errno
//          | 'short'                      transfer half (rounded down to 4 KiB on O_DIRECT files;
//                                         a transfer too small to halve passes unchanged)
//          | 'delay_us=' UINT             sleep that long before the result is returned
// Example: "write:3:eio,read:p0.01:short,any:*:delay_us=200".
//
// Rules are independent: each counts its own matching requests whether or not another rule
// fired on them. Delays add up; of the rules that change the result, the first in the list wins.
// A result that is already an error passes through (only delays apply to it).
//
// Thread safety: on_result may be called from any number of engine threads; counters and the
// random draws are under one mutex, sleeps happen outside it. The draw sequence is fixed by the
// seed; which request gets which draw depends on completion order across threads.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/status.h"
#include "io/io_engine.h"

namespace strata {

enum class FaultOp : uint8_t { read, write, any };
enum class FaultWhich : uint8_t { nth, probability, every };
enum class FaultKind : uint8_t { eio, enospc, short_transfer, eintr, eagain, delay };

struct FaultRule {
  FaultOp op = FaultOp::any;
  FaultWhich which = FaultWhich::every;
  uint64_t nth = 0;        // which == nth
  double probability = 0;  // which == probability
  FaultKind kind = FaultKind::eio;
  uint64_t delay_us = 0;  // kind == delay
};

// "write:3:eio" style, the spec spelling of one rule.
std::string fault_rule_to_string(const FaultRule& rule);

class FaultInjector : public IoFaultHook {
 public:
  explicit FaultInjector(std::vector<FaultRule> rules, uint64_t seed = 1);

  int64_t on_result(const IoRequest& request, uint64_t done, int attempt, int64_t result) override;

  const std::vector<FaultRule>& rules() const { return rules_; }
  uint64_t matched(size_t rule) const;  // requests that matched the rule's op
  uint64_t fired(size_t rule) const;    // times the rule changed or delayed a result
  uint64_t total_fired() const;

 private:
  struct RuleState {
    uint64_t matched = 0;
    uint64_t fired = 0;
    Rng rng{0};
  };

  const std::vector<FaultRule> rules_;
  mutable std::mutex mu_;
  std::vector<RuleState> state_;  // one per rule, guarded by mu_
};

// Parses the grammar above. invalid_argument naming the bad token and its item, e.g.
// "fault spec item 2 'read:x:eio': 'x' is not a request number, 'p<probability>' or '*'".
Result<std::shared_ptr<FaultInjector>> parse_fault_spec(const std::string& spec);

}  // namespace strata
