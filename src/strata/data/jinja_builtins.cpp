// The filters, tests, methods and global functions of the Jinja subset, as jinja2 and Python
// define them (jinja2.filters, jinja2.tests, str and dict methods) and as transformers adds
// them (tojson, raise_exception, strftime_now).
#include <algorithm>
#include <cctype>
#include <ctime>
#include <map>
#include <set>

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "strata/data/jinja_python.h"

namespace strata::jinja::python {

namespace {

const std::set<std::string> kSupportedMethods = {
    "items",    "keys",  "values", "get",   "strip",   "lstrip", "rstrip",    "startswith",
    "endswith", "split", "upper",  "lower", "replace", "title",  "capitalize"};

// Python's case mappings are Unicode's full ones without a locale ("ß".upper() is "SS"): ICU's
// with the root locale.
std::string upper(const std::string& text) {
  icu::UnicodeString unicode = icu::UnicodeString::fromUTF8(text);
  std::string out;
  unicode.toUpper(icu::Locale::getRoot()).toUTF8String(out);
  return out;
}

std::string lower(const std::string& text) {
  icu::UnicodeString unicode = icu::UnicodeString::fromUTF8(text);
  std::string out;
  unicode.toLower(icu::Locale::getRoot()).toUTF8String(out);
  return out;
}

std::string title_of(char32_t point) {
  icu::UnicodeString unicode(static_cast<UChar32>(point));
  std::string out;
  unicode
      .toTitle(nullptr, icu::Locale::getRoot(),
               U_TITLECASE_NO_BREAK_ADJUSTMENT | U_TITLECASE_NO_LOWERCASE)
      .toUTF8String(out);
  return out;
}

// str.capitalize(): the first character in title case, the rest in lower case.
std::string capitalize(const std::string& text) {
  std::u32string points = decode_utf8(text);
  if (points.empty()) return "";
  return title_of(points[0]) + lower(encode_utf8(points.substr(1)));
}

// str.title(): title case after a character that is not cased, lower case after one that is.
std::string title(const std::string& text) {
  std::string out;
  bool previous_cased = false;
  for (char32_t point : decode_utf8(text)) {
    std::string character;
    append_utf8(character, point);
    out += previous_cased ? lower(character) : title_of(point);
    previous_cased = u_hasBinaryProperty(static_cast<UChar32>(point), UCHAR_CASED);
  }
  return out;
}

// jinja2's title filter, unlike str.title(): each word (after a run of '-', whitespace or an
// opening bracket) with its first character upper-cased and the rest lower-cased.
std::string title_words(const std::string& text) {
  std::string out, word;
  auto flush = [&]() {
    std::u32string points = decode_utf8(word);
    if (!points.empty())
      out += upper(encode_utf8(points.substr(0, 1))) + lower(encode_utf8(points.substr(1)));
    word.clear();
  };
  bool in_separators = false;
  for (char32_t point : decode_utf8(text)) {
    bool separator = is_space(point) || point == '-' || point == '(' || point == '{' ||
                     point == '[' || point == '<';
    if (separator != in_separators) flush();
    in_separators = separator;
    append_utf8(word, point);
  }
  flush();
  return out;
}

// str.islower() (or isupper()): a cased character, and none of the other case or title case.
bool is_case(const std::string& text, bool lower_case) {
  bool cased = false;
  for (char32_t point : decode_utf8(text)) {
    UChar32 c = static_cast<UChar32>(point);
    if ((lower_case ? u_isUUppercase(c) : u_isULowercase(c)) || u_istitle(c)) return false;
    if (lower_case ? u_isULowercase(c) : u_isUUppercase(c)) cased = true;
  }
  return cased;
}

std::string replace(const std::string& text, const std::string& old, const std::string& with,
                    int64_t count) {
  std::string out;
  size_t pos = 0;
  if (old.empty()) {  // Python inserts `with` around every code point
    std::u32string points = decode_utf8(text);
    for (size_t i = 0; i < points.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += with;
      append_utf8(out, points[i]);
    }
    if (count < 0 || static_cast<int64_t>(points.size()) < count) out += with;
    return out;
  }
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    size_t found = text.find(old, pos);
    if (found == std::string::npos) break;
    out.append(text, pos, found - pos);
    out += with;
    pos = found + old.size();
  }
  out.append(text, pos, std::string::npos);
  return out;
}

Json split(const std::string& text, const Value* separator, int64_t max_split,
           const std::string& where) {
  Json parts = Json::array();
  if (!separator || (separator->kind == Value::Kind::Json && separator->json->is_null())) {
    std::u32string points = decode_utf8(text);
    size_t i = 0;
    while (true) {
      while (i < points.size() && is_space(points[i])) ++i;
      if (i == points.size()) break;
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
        size_t end = points.size();
        while (end > i && is_space(points[end - 1])) --end;
        parts.push_back(encode_utf8(points.substr(i, end - i)));
        break;
      }
      size_t start = i;
      while (i < points.size() && !is_space(points[i])) ++i;
      parts.push_back(encode_utf8(points.substr(start, i - start)));
    }
    return parts;
  }
  if (!separator->is_string()) fail(where, "split() needs a string separator");
  const std::string& sep = separator->json->get_ref<const std::string&>();
  if (sep.empty()) fail(where, "split() got an empty separator");
  size_t pos = 0;
  while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
    size_t found = text.find(sep, pos);
    if (found == std::string::npos) break;
    parts.push_back(text.substr(pos, found - pos));
    pos = found + sep.size();
  }
  parts.push_back(text.substr(pos));
  return parts;
}

Json pairs_of(const Json& object) {
  Json pairs = Json::array();
  for (auto it = object.begin(); it != object.end(); ++it) {
    pairs.push_back(Json::array({it.key(), it.value()}));
  }
  return pairs;
}

const Value* kwarg(const Kwargs& kwargs, const char* name) {
  for (const auto& [key, value] : kwargs) {
    if (key == name) return &value;
  }
  return nullptr;
}

// The argument at `index` or named `name`, or null.
const Value* argument(const std::vector<Value>& args, const Kwargs& kwargs, size_t index,
                      const char* name) {
  return index < args.size() ? &args[index] : kwarg(kwargs, name);
}

Value call_method(const Value& callee, const std::vector<Value>& args, const Kwargs& kwargs,
                  const std::string& where) {
  const Json& self = *callee.self;
  const std::string& name = callee.function;
  if (self.is_object()) {
    if (name == "items") return Value::of(pairs_of(self));
    if (name == "keys" || name == "values") {
      Json list = Json::array();
      for (auto it = self.begin(); it != self.end(); ++it) {
        list.push_back(name == "keys" ? Json(it.key()) : it.value());
      }
      return Value::of(std::move(list));
    }
    if (name == "get") {
      const Value* key = argument(args, kwargs, 0, "key");
      if (!key) fail(where, "get() needs a key");
      if (key->is_string()) {
        auto found = self.find(key->json->get<std::string>());
        if (found != self.end())
          return Value::of(std::shared_ptr<const Json>(callee.self, &*found));
      }
      const Value* fallback = argument(args, kwargs, 1, "default");
      return fallback ? *fallback : Value::of(Json(nullptr));
    }
  } else if (self.is_string()) {
    const std::string& text = self.get_ref<const std::string&>();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const Value* chars = argument(args, kwargs, 0, "chars");
      std::u32string set;
      bool given = chars && !(chars->kind == Value::Kind::Json && chars->json->is_null());
      if (given) set = decode_utf8(string_argument(*chars, "strip()'s argument", where));
      return Value::of(
          Json(strip(text, given ? &set : nullptr, name != "rstrip", name != "lstrip")));
    }
    if (name == "startswith" || name == "endswith") {
      const Value* affix = argument(args, kwargs, 0, "prefix");
      if (!affix) fail(where, name + "() needs an argument");
      std::vector<std::string> candidates;
      if (affix->kind == Value::Kind::Json && affix->json->is_array()) {
        for (const Json& each : *affix->json) {
          if (!each.is_string()) fail(where, name + "() takes strings");
          candidates.push_back(each.get<std::string>());
        }
      } else {
        candidates.push_back(string_argument(*affix, "its argument", where));
      }
      for (const std::string& candidate : candidates) {
        if (candidate.size() > text.size()) continue;
        size_t at = name == "startswith" ? 0 : text.size() - candidate.size();
        if (text.compare(at, candidate.size(), candidate) == 0) return Value::of(Json(true));
      }
      return Value::of(Json(false));
    }
    if (name == "split") {
      const Value* max_split = argument(args, kwargs, 1, "maxsplit");
      return Value::of(split(text, argument(args, kwargs, 0, "sep"),
                             max_split ? integer_argument(*max_split, "maxsplit", where) : -1,
                             where));
    }
    if (name == "upper") return Value::of(Json(upper(text)));
    if (name == "lower") return Value::of(Json(lower(text)));
    if (name == "title") return Value::of(Json(title(text)));
    if (name == "capitalize") return Value::of(Json(capitalize(text)));
    if (name == "replace") {
      if (args.size() < 2) fail(where, "replace() needs two arguments");
      return Value::of(
          Json(replace(text, string_argument(args[0], "replace()'s old", where),
                       string_argument(args[1], "replace()'s new", where),
                       args.size() > 2 ? integer_argument(args[2], "count", where) : -1)));
    }
  }
  fail(where, str("'", type_name(Value::of(callee.self)), " object' has no supported method '",
                  name, "'"));
}

std::string strftime_now(const std::string& format) {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string buffer(format.size() * 8 + 64, '\0');
  size_t written = std::strftime(buffer.data(), buffer.size(), format.c_str(), &local);
  buffer.resize(written);
  return buffer;
}

// The items selectattr and friends keep: those whose `test` (truthiness when absent) passes.
Value select(const Value& input, const std::vector<Value>& args, bool by_attribute, bool keep,
             const std::string& where) {
  size_t first_test = by_attribute ? 1 : 0;
  if (by_attribute && args.empty()) fail(where, "selectattr/rejectattr need an attribute name");
  Json kept = Json::array();
  for (const Value& item : iterate(input, where)) {
    Value subject = item;
    if (by_attribute) {
      // "a.b.0": jinja2 reads each dotted part as an item, digits as an index.
      std::string path = string_argument(args[0], "the attribute", where);
      size_t begin = 0;
      while (begin <= path.size()) {
        size_t end = std::min(path.find('.', begin), path.size());
        std::string part = path.substr(begin, end - begin);
        bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
        subject = get_item(
            subject, digits ? Value::of(Json(std::stoll(part))) : Value::of(Json(part)), where);
        begin = end + 1;
      }
    }
    bool passes;
    if (args.size() > first_test) {
      const std::string& test = string_argument(args[first_test], "the test name", where);
      passes = apply_test(test, subject,
                          std::vector<Value>(args.begin() + first_test + 1, args.end()), where);
    } else {
      passes = truthy(subject);
    }
    if (passes == keep) kept.push_back(to_json(item, where));
  }
  return Value::of(std::move(kept));
}

}  // namespace

Value call(const Value& callee, const std::vector<Value>& args, const Kwargs& kwargs,
           const std::string& where) {
  if (callee.kind == Value::Kind::Undefined) fail_undefined(callee, where);
  if (callee.kind != Value::Kind::Function) {
    fail(where, str("'", type_name(callee), "' object is not callable"));
  }
  if (callee.self) return call_method(callee, args, kwargs, where);
  const std::string& name = callee.function;
  if (name == "raise_exception") {
    std::string message = args.empty() ? "" : to_str(args[0], where);
    throw RenderError(str(where, "the template raised an error: ", message), message);
  }
  if (name == "namespace") {
    Value space;
    space.kind = Value::Kind::Namespace;
    space.space = std::make_shared<std::map<std::string, Value>>();
    for (const Value& initial : args) {
      if (initial.kind != Value::Kind::Json || !initial.json->is_object()) {
        fail(where, "namespace() takes a dict or keyword arguments");
      }
      for (auto it = initial.json->begin(); it != initial.json->end(); ++it) {
        (*space.space)[it.key()] = Value::of(it.value());
      }
    }
    for (const auto& [key, value] : kwargs) (*space.space)[key] = value;
    return space;
  }
  if (name == "strftime_now") {
    if (args.size() != 1) fail(where, "strftime_now() takes one format string");
    return Value::of(Json(strftime_now(string_argument(args[0], "the format", where))));
  }
  // range(stop) or range(start, stop[, step])
  if (args.empty() || args.size() > 3) fail(where, "range() takes one to three integers");
  int64_t start = 0, stop, step = 1;
  if (args.size() == 1) {
    stop = integer_argument(args[0], "range()'s stop", where);
  } else {
    start = integer_argument(args[0], "range()'s start", where);
    stop = integer_argument(args[1], "range()'s stop", where);
    if (args.size() == 3) step = integer_argument(args[2], "range()'s step", where);
  }
  if (step == 0) fail(where, "range() step must not be zero");
  Json list = Json::array();
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (list.size() >= 100000)
      fail(where, "range() is limited to 100000 items (as in jinja2's sandbox)");
    list.push_back(i);
  }
  return Value::of(std::move(list));
}

Value apply_filter(const std::string& name, const Value& input, const std::vector<Value>& args,
                   const Kwargs& kwargs, const std::string& where) {
  if (name == "safe") return Value::of(Json(to_str(input, where)));  // Markup(str(value))
  if (name == "default" || name == "d") {
    const Value* fallback = argument(args, kwargs, 0, "default_value");
    const Value* boolean = argument(args, kwargs, 1, "boolean");
    bool use =
        input.kind == Value::Kind::Undefined || (boolean && truthy(*boolean) && !truthy(input));
    if (!use) return input;
    return fallback ? *fallback : Value::of(Json(""));
  }
  if (name == "length" || name == "count") {
    if (input.kind == Value::Kind::Undefined) return Value::of(Json(0));
    if (input.kind == Value::Kind::Json) {
      const Json& json = *input.json;
      if (json.is_string()) {
        return Value::of(
            Json(static_cast<int64_t>(decode_utf8(json.get_ref<const std::string&>()).size())));
      }
      if (json.is_array() || json.is_object())
        return Value::of(Json(static_cast<int64_t>(json.size())));
    }
    fail(where, str("object of type '", type_name(input), "' has no len()"));
  }
  if (name == "tojson") {
    const Value* indent = kwarg(kwargs, "indent");
    const Value* sort_keys = kwarg(kwargs, "sort_keys");
    const Value* ensure_ascii = kwarg(kwargs, "ensure_ascii");
    const Value* separators = kwarg(kwargs, "separators");
    int indent_width = -1;
    if (indent && !(indent->kind == Value::Kind::Json && indent->json->is_null())) {
      indent_width = static_cast<int>(integer_argument(*indent, "tojson's indent", where));
    }
    std::string item_separator = indent_width >= 0 ? "," : ", ", key_separator = ": ";
    if (separators && !(separators->kind == Value::Kind::Json && separators->json->is_null())) {
      if (separators->kind != Value::Kind::Json || !separators->json->is_array() ||
          separators->json->size() != 2 || !(*separators->json)[0].is_string() ||
          !(*separators->json)[1].is_string()) {
        fail(where, "tojson's separators must be two strings");
      }
      item_separator = (*separators->json)[0].get<std::string>();
      key_separator = (*separators->json)[1].get<std::string>();
    }
    return Value::of(
        Json(dumps(to_json(input, where), indent_width, sort_keys && truthy(*sort_keys),
                   ensure_ascii && truthy(*ensure_ascii), item_separator, key_separator)));
  }
  if (name == "string") return Value::of(Json(to_str(input, where)));
  if (name == "list") {
    Json list = Json::array();
    for (const Value& item : iterate(input, where)) list.push_back(to_json(item, where));
    return Value::of(std::move(list));
  }
  if (name == "join") {
    const Value* separator = argument(args, kwargs, 0, "d");
    if (kwarg(kwargs, "attribute")) fail(where, "join's attribute argument is not supported");
    std::string glue = separator ? to_str(*separator, where) : "", out;
    bool first = true;
    for (const Value& item : iterate(input, where)) {
      if (!first) out += glue;
      out += to_str(item, where);
      first = false;
    }
    return Value::of(Json(out));
  }
  if (name == "items") {
    if (input.kind == Value::Kind::Undefined) return Value::of(Json::array());
    if (input.kind != Value::Kind::Json || !input.json->is_object()) {
      fail(where, str("the items filter needs a mapping, not ", type_name(input)));
    }
    return Value::of(pairs_of(*input.json));
  }
  if (name == "selectattr" || name == "rejectattr") {
    return select(input, args, true, name == "selectattr", where);
  }
  if (name == "select" || name == "reject") {
    return select(input, args, false, name == "select", where);
  }
  if (name == "first" || name == "last") {
    std::vector<Value> items = iterate(input, where);
    if (items.empty()) return Value::undefined(str("no ", name, " item of an empty sequence"));
    return name == "first" ? items.front() : items.back();
  }
  std::string text = to_str(input, where);
  if (name == "trim") {
    const Value* chars = argument(args, kwargs, 0, "chars");
    std::u32string set;
    bool given = chars && !(chars->kind == Value::Kind::Json && chars->json->is_null());
    if (given) set = decode_utf8(string_argument(*chars, "trim's chars", where));
    return Value::of(Json(strip(text, given ? &set : nullptr, true, true)));
  }
  if (name == "upper") return Value::of(Json(upper(text)));
  if (name == "lower") return Value::of(Json(lower(text)));
  if (name == "capitalize") return Value::of(Json(capitalize(text)));
  if (name == "title") return Value::of(Json(title_words(text)));
  if (name == "replace") {
    if (args.size() < 2) fail(where, "the replace filter needs two arguments");
    const Value* count = argument(args, kwargs, 2, "count");
    return Value::of(Json(replace(text, to_str(args[0], where), to_str(args[1], where),
                                  count ? integer_argument(*count, "count", where) : -1)));
  }
  fail(where, str("bug: filter '", name, "' passed the parser but has no implementation"));
}

bool apply_test(const std::string& test_name, const Value& input, const std::vector<Value>& args,
                const std::string& where) {
  static const std::map<std::string, std::string> kAliases = {
      {"==", "eq"}, {"!=", "ne"}, {"<", "lt"}, {"<=", "le"}, {">", "gt"}, {">=", "ge"}};
  auto alias = kAliases.find(test_name);
  const std::string& name = alias == kAliases.end() ? test_name : alias->second;
  const bool is_json = input.kind == Value::Kind::Json;
  const Json* json = is_json ? input.json.get() : nullptr;
  if (name == "defined") return input.kind != Value::Kind::Undefined;
  if (name == "undefined") return input.kind == Value::Kind::Undefined;
  if (name == "none") return is_json && json->is_null();
  if (name == "string") return is_json && json->is_string();
  if (name == "number") return is_json && (json->is_number() || json->is_boolean());
  if (name == "integer") return is_json && json->is_number_integer();
  if (name == "float") return is_json && json->is_number_float();
  if (name == "boolean") return is_json && json->is_boolean();
  if (name == "true") return is_json && json->is_boolean() && json->get<bool>();
  if (name == "false") return is_json && json->is_boolean() && !json->get<bool>();
  if (name == "mapping") return is_json && json->is_object();
  if (name == "iterable" || name == "sequence") {  // Undefined iterates, as an empty sequence
    return input.kind == Value::Kind::Undefined ||
           (is_json && (json->is_string() || json->is_array() || json->is_object()));
  }
  if (name == "callable") return input.kind == Value::Kind::Function;
  if (name == "lower" || name == "upper") return is_case(to_str(input, where), name == "lower");
  if (name == "odd" || name == "even") {
    int64_t value = integer_argument(input, "the value tested", where);
    return (value % 2 != 0) == (name == "odd");
  }
  if (args.empty()) fail(where, str("the test '", name, "' needs an argument"));
  const Value& other = args[0];
  if (name == "equalto" || name == "eq") return equal(input, other);
  if (name == "ne") return !equal(input, other);
  if (name == "lt" || name == "lessthan") return compare(input, other, "<", where) < 0;
  if (name == "le") return compare(input, other, "<=", where) <= 0;
  if (name == "gt" || name == "greaterthan") return compare(input, other, ">", where) > 0;
  if (name == "ge") return compare(input, other, ">=", where) >= 0;
  if (name == "in") return contains(other, input, where);
  if (name == "divisibleby") {
    int64_t divisor = integer_argument(other, "divisibleby's argument", where);
    if (divisor == 0) fail(where, "divisibleby 0");
    return integer_argument(input, "the value tested", where) % divisor == 0;
  }
  fail(where, str("bug: test '", name, "' passed the parser but has no implementation"));
}

bool method_supported(const std::string& name) { return kSupportedMethods.count(name) > 0; }

}  // namespace strata::jinja::python
