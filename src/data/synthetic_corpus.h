// A generated English-like corpus, so the bare `strata train` has something to learn without any
// download. Sentences come from a small grammar (subjects, verbs, objects, adjectives, places,
// connectives, dialogue, paragraphs), with a recurring character per paragraph so that attention
// has something to copy. A byte-level GPT drops from ln(256) ~ 5.5 toward ~1.5 nats/byte within
// a few hundred steps on it.
#pragma once

#include <cstdint>
#include <string>

namespace strata {

// Exactly n_bytes of printable ASCII plus '\n'. The same seed gives the same bytes on every
// machine and standard library: it uses its own generator, not std:: distributions.
std::string synthetic_corpus(int64_t n_bytes, uint64_t seed);

}  // namespace strata
