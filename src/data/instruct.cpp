#include "data/instruct.h"

#include <nlohmann/json.hpp>

#include "core/format.h"

namespace strata {

namespace {

// example[key] as a string; invalid_argument naming where and the key otherwise.
Result<std::string> string_field(const nlohmann::json& object, const std::string& key,
                                 const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) return invalid_argument(where + ": no \"" + key + "\"");
  if (!it->is_string()) return invalid_argument(where + ": \"" + key + "\" is not a string");
  return it->get<std::string>();
}

// Jinja's trim: leading and trailing whitespace (Python's str.strip) removed.
std::string trimmed(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t first = s.find_first_not_of(ws);
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(ws) - first + 1);
}

Status append_message(std::vector<TextSegment>& out, ChatTemplate chat, const std::string& role,
                      const std::string& content) {
  const bool assistant = role == "assistant";
  if (chat == ChatTemplate::chatml) {
    out.push_back({"<|im_start|>", false, true});
    out.push_back({role + "\n", false, false});
    out.push_back({content, assistant, false});
    out.push_back({"<|im_end|>", assistant, true});
    out.push_back({"\n", false, false});
    return Status::ok_status();
  }
  out.push_back({"<|start_header_id|>", false, true});
  out.push_back({role, false, false});
  out.push_back({"<|end_header_id|>", false, true});
  out.push_back({"\n\n", false, false});
  out.push_back({trimmed(content), assistant, false});
  out.push_back({"<|eot_id|>", assistant, true});
  return Status::ok_status();
}

Result<std::vector<TextSegment>> chat_segments(const nlohmann::json& messages, ChatTemplate chat,
                                               const ExampleTokens& special,
                                               const std::string& where) {
  if (!messages.is_array() || messages.empty()) {
    return invalid_argument(where + ": \"messages\" is not a non-empty list");
  }
  if (chat == ChatTemplate::none) {
    return invalid_argument(where +
                            ": \"messages\" need a chat template: pass --chat-template chatml or "
                            "llama3");
  }
  std::vector<TextSegment> out;
  if (chat == ChatTemplate::llama3) {
    out.push_back({special.bos.empty() ? "<|begin_of_text|>" : special.bos, false, true});
  }
  bool any_assistant = false;
  for (size_t k = 0; k < messages.size(); ++k) {
    const std::string at = where + ": \"messages\"[" + std::to_string(k) + "]";
    if (!messages[k].is_object()) return invalid_argument(at + " is not an object");
    STRATA_ASSIGN_OR_RETURN(const std::string role, string_field(messages[k], "role", at));
    STRATA_ASSIGN_OR_RETURN(const std::string content, string_field(messages[k], "content", at));
    const bool known = role == "system" || role == "user" || role == "assistant" ||
                       (role == "tool" && chat == ChatTemplate::chatml);
    if (!known) {
      return invalid_argument(at + ": role \"" + excerpt(role) +
                              "\" is not system, user or assistant" +
                              (chat == ChatTemplate::chatml ? " (or tool)" : ""));
    }
    any_assistant = any_assistant || role == "assistant";
    STRATA_RETURN_IF_ERROR(append_message(out, chat, role, content));
  }
  if (!any_assistant) {
    return invalid_argument(where + ": no \"assistant\" message: nothing of it would be trained");
  }
  return out;
}

}  // namespace

Result<ChatTemplate> parse_chat_template(const std::string& name) {
  if (name == "chatml") return ChatTemplate::chatml;
  if (name == "llama3") return ChatTemplate::llama3;
  return invalid_argument("--chat-template '" + excerpt(name) +
                          "' is not a built-in template (chatml, llama3)");
}

Result<std::vector<TextSegment>> example_segments(const nlohmann::json& example, ChatTemplate chat,
                                                  const ExampleTokens& special,
                                                  const std::string& where) {
  if (!example.is_object()) return invalid_argument(where + ": not a JSON object");
  if (example.contains("messages")) {
    return chat_segments(example.at("messages"), chat, special, where);
  }
  std::vector<TextSegment> out;
  if (example.contains("prompt") || example.contains("completion")) {
    STRATA_ASSIGN_OR_RETURN(std::string prompt, string_field(example, "prompt", where));
    STRATA_ASSIGN_OR_RETURN(std::string completion, string_field(example, "completion", where));
    out.push_back({std::move(prompt), false, false});
    out.push_back({std::move(completion), true, false});
  } else if (example.contains("text")) {
    STRATA_ASSIGN_OR_RETURN(std::string text, string_field(example, "text", where));
    out.push_back({std::move(text), true, false});
  } else {
    return invalid_argument(where +
                            ": an example has \"text\", \"prompt\" and \"completion\", or "
                            "\"messages\"");
  }
  if (!special.eos.empty()) out.push_back({special.eos, true, true});
  return out;
}

}  // namespace strata
