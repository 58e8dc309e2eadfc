// Instruction and chat examples (one JSON object per JSONL line) as text segments, each either
// trained on or not, for `strata prepare` to encode with a loss mask.
//
// Note [Instruction data]
// A line is one example, in one of three shapes:
//   {"text": T}                         every token of T counts, then eos;
//   {"prompt": P, "completion": C}      P does not count, C and eos do (TRL's prompt-completion:
//                                       the two are encoded apart and concatenated);
//   {"messages": [{"role", "content"}, ...]}  rendered with a chat template; only the assistant
//                                       turns' content and their end-of-turn marker count (TRL's
//                                       assistant_only_loss), headers and other roles do not.
// Built-in templates, written from the published formats: chatml
//   <|im_start|>{role}\n{content}<|im_end|>\n  per message;
// llama3 (Meta Llama 3 Instruct)
//   bos, then <|start_header_id|>{role}<|end_header_id|>\n\n{content | trim}<|eot_id|>.
// A template's markers are encoded with the tokenizer's added tokens matched (one id each in the
// families' own tokenizers); content as --special-tokens says. Roles are system, user, assistant
// (and tool for chatml); anything else, a missing or non-string field, or messages without a
// template, is refused with one line naming the file, the line and the field.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata {

enum class ChatTemplate { none, chatml, llama3 };

// "chatml" or "llama3"; invalid_argument naming --chat-template and the choices otherwise.
Result<ChatTemplate> parse_chat_template(const std::string& name);

struct TextSegment {
  std::string text;
  bool counted = false;  // its tokens are trained as targets
  bool marker = false;   // a template's marker: encoded with the added tokens matched
};

// The special tokens an example ends or starts with ("" when the tokenizer has none).
struct ExampleTokens {
  std::string bos, eos;
};

// One example's segments (Note [Instruction data]); `where` ("chat.jsonl:3") starts each error.
Result<std::vector<TextSegment>> example_segments(const nlohmann::json& example, ChatTemplate chat,
                                                  const ExampleTokens& special,
                                                  const std::string& where);

}  // namespace strata
