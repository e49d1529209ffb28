// The Python semantics under the Jinja subset (jinja.h): the values a template computes with
// and what jinja2 does with them — str(), repr(), ==, truthiness, slicing, json.dumps, the
// filters, tests and methods chat templates use. Internal to jinja.cpp; tests reach it through
// Template.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/data/jinja.h"

namespace strata::jinja::python {

// A template value: JSON data (shared, so that `messages[3].content` aliases into the context
// rather than copying it), jinja2's Undefined, a namespace() object, or a callable (a global
// such as raise_exception, or a method bound to its object such as `message.items`).
struct Value {
  enum class Kind { Undefined, Json, Namespace, Function };
  Kind kind = Kind::Undefined;
  std::shared_ptr<const Json> json;                     // Json
  std::shared_ptr<std::map<std::string, Value>> space;  // Namespace: its attributes
  std::string function;                                 // Function: the name
  std::shared_ptr<const Json> self;                     // Function: a method's object
  std::string why;  // Undefined: what jinja2 says when it is used ("'x' is undefined")

  static Value of(Json json) { return of(std::make_shared<const Json>(std::move(json))); }
  static Value of(std::shared_ptr<const Json> json) {
    Value value;
    value.kind = Kind::Json;
    value.json = std::move(json);
    return value;
  }
  static Value undefined(std::string why) {
    Value value;
    value.why = std::move(why);
    return value;
  }
  static Value function_of(std::string name, std::shared_ptr<const Json> self = nullptr) {
    Value value;
    value.kind = Kind::Function;
    value.function = std::move(name);
    value.self = std::move(self);
    return value;
  }
  bool is_string() const { return kind == Kind::Json && json->is_string(); }
};

using Kwargs = std::vector<std::pair<std::string, Value>>;

// A number as Python sees it: bool and int are integers.
struct Number {
  bool is_integer;
  int64_t integer;
  double real;
  double as_real() const { return is_integer ? static_cast<double>(integer) : real; }
};

// --- helpers of jinja_python.cpp and jinja_builtins.cpp

// Throws RenderError(where + message).
[[noreturn]] void fail(const std::string& where, const std::string& message);
// Throws what jinja2 says when an Undefined is used ("'x' is undefined").
[[noreturn]] void fail_undefined(const Value& value, const std::string& where);

std::u32string decode_utf8(std::string_view text);
void append_utf8(std::string& out, char32_t point);
std::string encode_utf8(const std::u32string& points);
bool is_space(char32_t point);  // Python's str.isspace()
// Python's str.strip(chars) (whitespace when `chars` is null), lstrip or rstrip.
std::string strip(std::string_view text, const std::u32string* chars, bool left, bool right);

bool number_of(const Value& value, Number& number);  // false when it is not one
std::string type_name(const Value& value);           // Python's: "str", "dict", ...
int64_t integer_argument(const Value& value, const char* what, const std::string& where);
const std::string& string_argument(const Value& value, const char* what, const std::string& where);
bool equal(const Value& a, const Value& b);  // Python's ==
// Python's <, as -1, 0 or 1; `op` names the operator in the error.
int compare(const Value& a, const Value& b, const std::string& op, const std::string& where);
bool contains(const Value& container, const Value& item, const std::string& where);

// --- what templates do with values

// `where` ("FILE line N: ") prefixes each error these raise (RenderError).
bool truthy(const Value& value);
std::string to_str(const Value& value, const std::string& where);
Json to_json(const Value& value, const std::string& where);
std::vector<Value> iterate(const Value& value, const std::string& where);
Value get_attribute(const Value& object, const std::string& name, const std::string& where);
Value get_item(const Value& object, const Value& key, const std::string& where);
Value slice(const Value& object, const Value bounds[3], const std::string& where);
Value call(const Value& callee, const std::vector<Value>& args, const Kwargs& kwargs,
           const std::string& where);
Value apply_filter(const std::string& name, const Value& input, const std::vector<Value>& args,
                   const Kwargs& kwargs, const std::string& where);
bool apply_test(const std::string& name, const Value& input, const std::vector<Value>& args,
                const std::string& where);
Value unary_arithmetic(const std::string& op, const Value& operand, const std::string& where);
Value binary_operator(const std::string& op, const Value& left, const Value& right,
                      const std::string& where);

// Whether some type has a method of this name that the subset implements.
bool method_supported(const std::string& name);

// A string literal's body with Python's escapes (\n, \t, \x41, \u00e9, ...) decoded.
std::string decode_string_literal(std::string_view body);

// Python's str.isspace() whitespace, as jinja2's `-` markers and lstrip_blocks strip it.
std::string lstrip_whitespace(std::string_view text);
std::string rstrip_whitespace(std::string_view text);
bool is_all_whitespace(std::string_view text);

// json.dumps(value, ensure_ascii, indent, separators, sort_keys); indent < 0 means None.
std::string dumps(const Json& value, int indent, bool sort_keys, bool ensure_ascii,
                  const std::string& item_separator, const std::string& key_separator);
std::string repr(const Json& value);

}  // namespace strata::jinja::python
