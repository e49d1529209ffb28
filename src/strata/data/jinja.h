// The subset of Jinja that Hugging Face chat templates are written in, configured as
// transformers' apply_chat_template configures jinja2: trim_blocks and lstrip_blocks on, the
// final newline of the source dropped, `tojson` as json.dumps(ensure_ascii=False), the globals
// raise_exception, strftime_now and namespace, and loop controls (break, continue). Values
// follow Python: printing, equality, truthiness, string methods and Undefined behave as they do
// under jinja2, so a prompt renders byte for byte as Python renders it (checked against
// python3-jinja2 by tests/data/test_chat_template.cpp). A construct outside the subset is
// refused when the template is parsed, naming it and its line: never a wrong prompt.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "strata/core/error.h"

namespace strata::jinja {

// Key order is kept as written, as Python's dicts keep it: `tojson` of a tool schema must print
// its keys in the client's order.
using Json = nlohmann::ordered_json;

// A render that failed: the template called raise_exception (message() is its text, e.g. "
// Conversation roles must alternate user/assistant/user/assistant/..."), or an operation
// jinja2 would refuse too (adding a string to a number, an attribute of an undefined value).
class RenderError : public UserError {
 public:
  RenderError(const std::string& what, std::string message)
      : UserError(what), message_(std::move(message)) {}
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

struct Node;

class Template {
 public:
  // Parses `source` once. `name` (a file path, usually) prefixes every error. Throws UserError
  // naming the construct and the line for a tag, filter, test, method, function or operator
  // outside the subset (docs/models.md lists it).
  Template(std::string_view source, std::string name);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with `context`, a JSON object whose keys are the template's variables. Const and
  // reentrant: one parsed template may render on many threads at once.
  std::string render(const Json& context) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::unique_ptr<Node> root_;
};

}  // namespace strata::jinja
