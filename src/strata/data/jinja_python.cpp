// Python's semantics for the Jinja subset: what jinja2 does when a chat template prints,
// compares, slices or computes with a value. Strings are UTF-8; Python counts and slices them in
// code points, so the helpers here do too. The filters, tests and methods are in
// jinja_builtins.cpp.
#include "strata/data/jinja_python.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <set>

#include <unicode/uchar.h>

namespace strata::jinja::python {

void fail(const std::string& where, const std::string& message) {
  throw RenderError(where + message, "");
}

// --- UTF-8 and code points

std::u32string decode_utf8(std::string_view text) {
  std::u32string points;
  points.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    unsigned char lead = static_cast<unsigned char>(text[i]);
    int length = lead < 0x80           ? 1
                 : (lead >> 5) == 0x6  ? 2
                 : (lead >> 4) == 0xE  ? 3
                 : (lead >> 3) == 0x1E ? 4
                                       : 0;
    if (length == 0 || i + length > text.size()) {  // not UTF-8: keep the byte as a point
      points += static_cast<char32_t>(lead);
      ++i;
      continue;
    }
    char32_t point = length == 1 ? lead : lead & (0x7F >> length);
    for (int k = 1; k < length; ++k) point = (point << 6) | (text[i + k] & 0x3F);
    points += point;
    i += length;
  }
  return points;
}

void append_utf8(std::string& out, char32_t point) {
  if (point < 0x80) {
    out += static_cast<char>(point);
  } else if (point < 0x800) {
    out += static_cast<char>(0xC0 | (point >> 6));
    out += static_cast<char>(0x80 | (point & 0x3F));
  } else if (point < 0x10000) {
    out += static_cast<char>(0xE0 | (point >> 12));
    out += static_cast<char>(0x80 | ((point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (point >> 18));
    out += static_cast<char>(0x80 | ((point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (point & 0x3F));
  }
}

std::string encode_utf8(const std::u32string& points) {
  std::string out;
  for (char32_t point : points) append_utf8(out, point);
  return out;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Python's str.strip(chars): whitespace when `chars` is null.
std::string strip(std::string_view text, const std::u32string* chars, bool left, bool right) {
  std::u32string points = decode_utf8(text);
  auto strips = [&](char32_t c) {
    return chars ? chars->find(c) != std::u32string::npos : is_space(c);
  };
  size_t begin = 0, end = points.size();
  if (left) {
    while (begin < end && strips(points[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strips(points[end - 1])) --end;
  }
  return encode_utf8(points.substr(begin, end - begin));
}

// --- numbers

bool number_of(const Value& value, Number& number) {
  if (value.kind != Value::Kind::Json) return false;
  const Json& json = *value.json;
  if (json.is_boolean()) {
    number = {true, json.get<bool>() ? 1 : 0, 0};
  } else if (json.is_number_integer()) {  // unsigned too
    number = {true, json.get<int64_t>(), 0};
  } else if (json.is_number_float()) {
    number = {false, 0, json.get<double>()};
  } else {
    return false;
  }
  return true;
}

std::string type_name(const Value& value) {
  switch (value.kind) {
    case Value::Kind::Undefined:
      return "Undefined";
    case Value::Kind::Namespace:
      return "Namespace";
    case Value::Kind::Function:
      return "builtin_function_or_method";
    case Value::Kind::Json:
      break;
  }
  const Json& json = *value.json;
  if (json.is_null()) return "NoneType";
  if (json.is_boolean()) return "bool";
  if (json.is_number_integer()) return "int";
  if (json.is_number_float()) return "float";
  if (json.is_string()) return "str";
  if (json.is_array()) return "list";
  return "dict";
}

void fail_undefined(const Value& value, const std::string& where) {
  fail(where, value.why.empty() ? "an undefined value was used" : value.why);
}

int64_t integer_argument(const Value& value, const char* what, const std::string& where) {
  Number number;
  if (!number_of(value, number) || !number.is_integer) {
    fail(where, str(what, " must be an integer, not ", type_name(value)));
  }
  return number.integer;
}

const std::string& string_argument(const Value& value, const char* what, const std::string& where) {
  if (!value.is_string()) fail(where, str(what, " must be a string, not ", type_name(value)));
  return value.json->get_ref<const std::string&>();
}

namespace {

bool json_equal(const Json& a, const Json& b) {
  bool a_number = a.is_number() || a.is_boolean(), b_number = b.is_number() || b.is_boolean();
  if (a_number && b_number) {
    Number x, y;
    number_of(Value::of(a), x);
    number_of(Value::of(b), y);
    if (x.is_integer && y.is_integer) return x.integer == y.integer;
    return x.as_real() == y.as_real();
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!json_equal(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {  // Python's dicts compare without regard to key order
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto other = b.find(it.key());
      if (other == b.end() || !json_equal(it.value(), *other)) return false;
    }
    return true;
  }
  return a == b;
}

}  // namespace

bool equal(const Value& a, const Value& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::Undefined:
      return true;
    case Value::Kind::Namespace:
      return a.space == b.space;
    case Value::Kind::Function:
      return a.function == b.function && a.self == b.self;
    case Value::Kind::Json:
      return json_equal(*a.json, *b.json);
  }
  return false;
}

// Python's <: -1, 0 or 1.
int compare(const Value& a, const Value& b, const std::string& op, const std::string& where) {
  if (a.kind == Value::Kind::Undefined) fail_undefined(a, where);
  if (b.kind == Value::Kind::Undefined) fail_undefined(b, where);
  Number x, y;
  if (number_of(a, x) && number_of(b, y)) {
    if (x.is_integer && y.is_integer) return x.integer < y.integer ? -1 : x.integer > y.integer;
    return x.as_real() < y.as_real() ? -1 : x.as_real() > y.as_real();
  }
  if (a.is_string() && b.is_string()) {  // UTF-8 byte order is code point order
    int c = a.json->get_ref<const std::string&>().compare(b.json->get_ref<const std::string&>());
    return c < 0 ? -1 : c > 0;
  }
  if (a.kind == Value::Kind::Json && b.kind == Value::Kind::Json && a.json->is_array() &&
      b.json->is_array()) {
    for (size_t i = 0; i < a.json->size() && i < b.json->size(); ++i) {
      Value left = Value::of(std::shared_ptr<const Json>(a.json, &(*a.json)[i]));
      Value right = Value::of(std::shared_ptr<const Json>(b.json, &(*b.json)[i]));
      if (!equal(left, right)) return compare(left, right, op, where);
    }
    return a.json->size() < b.json->size() ? -1 : a.json->size() > b.json->size();
  }
  fail(where, str("'", op, "' not supported between instances of '", type_name(a), "' and '",
                  type_name(b), "'"));
}

bool contains(const Value& container, const Value& item, const std::string& where) {
  if (container.kind == Value::Kind::Undefined) return false;  // iterates as empty
  if (container.kind != Value::Kind::Json) {
    fail(where, str("argument of type '", type_name(container), "' is not iterable"));
  }
  const Json& json = *container.json;
  if (json.is_string()) {
    if (!item.is_string()) {
      fail(where, str("'in <string>' requires string as left operand, not ", type_name(item)));
    }
    return json.get_ref<const std::string&>().find(item.json->get_ref<const std::string&>()) !=
           std::string::npos;
  }
  if (json.is_object()) return item.is_string() && json.contains(item.json->get<std::string>());
  if (json.is_array()) {
    for (const Json& element : json) {
      if (item.kind == Value::Kind::Json && json_equal(element, *item.json)) return true;
    }
    return false;
  }
  fail(where, str("argument of type '", type_name(container), "' is not iterable"));
}

namespace {

Value number_value(const Number& number) {
  return number.is_integer ? Value::of(Json(number.integer)) : Value::of(Json(number.real));
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

const std::set<std::string> kDictMethods = {"clear",      "copy",   "fromkeys", "get",
                                            "items",      "keys",   "pop",      "popitem",
                                            "setdefault", "update", "values"};
const std::set<std::string> kListMethods = {"append", "clear",   "copy",   "count",
                                            "extend", "index",   "insert", "pop",
                                            "remove", "reverse", "sort"};
const std::set<std::string> kStrMethods = {
    "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
    "swapcase",     "title",       "translate", "upper",      "zfill"};

// Python's slice.indices(): start, stop, step clamped to a sequence of `length`.
void slice_indices(const Value bounds[3], int64_t length, int64_t& start, int64_t& stop,
                   int64_t& step, const std::string& where) {
  auto given = [](const Value& bound) {
    return bound.kind == Value::Kind::Json && !bound.json->is_null();
  };
  step = given(bounds[2]) ? integer_argument(bounds[2], "a slice step", where) : 1;
  if (step == 0) fail(where, "slice step cannot be zero");
  auto clamp = [&](const Value& bound, int64_t fallback) {
    if (!given(bound)) return fallback;
    int64_t index = integer_argument(bound, "a slice index", where);
    if (index < 0) index = std::max<int64_t>(index + length, step < 0 ? -1 : 0);
    if (index >= length) index = step < 0 ? length - 1 : length;
    return index;
  };
  start = clamp(bounds[0], step < 0 ? length - 1 : 0);
  stop = clamp(bounds[1], step < 0 ? -1 : length);
}

void escape_json_string(std::string& out, const std::string& text, bool ensure_ascii) {
  out += '"';
  for (char32_t c : decode_utf8(text)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default: {
        char hex[16];
        if (c < 0x20 || (ensure_ascii && c > 0x7E && c != 0x7F)) {
          if (c >= 0x10000) {
            char32_t v = c - 0x10000;
            std::snprintf(hex, sizeof(hex), "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                          0xDC00 + (v & 0x3FF));
          } else {
            std::snprintf(hex, sizeof(hex), "\\u%04x", static_cast<unsigned>(c));
          }
          out += hex;
        } else {
          append_utf8(out, c);
        }
      }
    }
  }
  out += '"';
}

// Python's float.__repr__: the shortest digits that read back as the same double.
std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  char buffer[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*e", precision - 1, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  std::string scientific = buffer;
  bool negative = scientific[0] == '-';
  size_t e = scientific.find('e');
  int exponent = std::atoi(scientific.c_str() + e + 1);
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i) {
    if (scientific[i] != '.') digits += scientific[i];
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(-exponent - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out += digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char tail[16];
  std::snprintf(tail, sizeof(tail), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + tail;
}

// Python's repr(str): single quotes unless the text has one and no double quote.
// Python's str.isprintable() for one character: not a control, format, surrogate, private-use
// or unassigned character, nor a separator other than the space.
bool printable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_SPACE_SEPARATOR:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
      return false;
    default:
      return true;
  }
}

std::string string_repr(const std::string& text) {
  bool has_single = text.find('\'') != std::string::npos;
  bool has_double = text.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode_utf8(text)) {
    char hex[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!printable(c)) {
      std::snprintf(hex, sizeof(hex),
                    c < 0x100     ? "\\x%02x"
                    : c < 0x10000 ? "\\u%04x"
                                  : "\\U%08x",
                    static_cast<unsigned>(c));
      out += hex;
    } else {
      append_utf8(out, c);
    }
  }
  return out + quote;
}

}  // namespace

bool truthy(const Value& value) {
  switch (value.kind) {
    case Value::Kind::Undefined:
      return false;
    case Value::Kind::Namespace:
    case Value::Kind::Function:
      return true;
    case Value::Kind::Json:
      break;
  }
  const Json& json = *value.json;
  if (json.is_null()) return false;
  if (json.is_boolean()) return json.get<bool>();
  if (json.is_number_integer()) return json.get<int64_t>() != 0;
  if (json.is_number_float()) return json.get<double>() != 0;
  if (json.is_string()) return !json.get_ref<const std::string&>().empty();
  return !json.empty();  // lists, dicts
}

std::string repr(const Json& value) {
  if (value.is_null()) return "None";
  if (value.is_boolean()) return value.get<bool>() ? "True" : "False";
  if (value.is_number_unsigned()) return std::to_string(value.get<uint64_t>());
  if (value.is_number_integer()) return std::to_string(value.get<int64_t>());
  if (value.is_number_float()) return float_repr(value.get<double>());
  if (value.is_string()) return string_repr(value.get_ref<const std::string&>());
  std::string out;
  if (value.is_array()) {
    out = "[";
    for (size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + repr(value[i]);
    return out + "]";
  }
  out = "{";
  bool first = true;
  for (auto it = value.begin(); it != value.end(); ++it) {
    out += (first ? "" : ", ") + string_repr(it.key()) + ": " + repr(it.value());
    first = false;
  }
  return out + "}";
}

std::string to_str(const Value& value, const std::string& where) {
  switch (value.kind) {
    case Value::Kind::Undefined:
      return "";
    case Value::Kind::Namespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [key, attribute] : *value.space) {
        out += (first ? "" : ", ") + string_repr(key) + ": ";
        out +=
            attribute.kind == Value::Kind::Json ? repr(*attribute.json) : to_str(attribute, where);
        first = false;
      }
      return out + "}>";
    }
    case Value::Kind::Function:
      return "<built-in method " + value.function + ">";
    case Value::Kind::Json:
      break;
  }
  return value.json->is_string() ? value.json->get<std::string>() : repr(*value.json);
}

Json to_json(const Value& value, const std::string& where) {
  if (value.kind == Value::Kind::Json) return *value.json;
  if (value.kind == Value::Kind::Undefined) fail_undefined(value, where);
  fail(where, str("a ", type_name(value), " cannot be stored in a list, a dict or JSON"));
}

std::vector<Value> iterate(const Value& value, const std::string& where) {
  std::vector<Value> items;
  if (value.kind == Value::Kind::Undefined) return items;
  if (value.kind != Value::Kind::Json) {
    fail(where, str("'", type_name(value), "' object is not iterable"));
  }
  const Json& json = *value.json;
  if (json.is_array()) {
    for (const Json& element : json) {
      items.push_back(Value::of(std::shared_ptr<const Json>(value.json, &element)));
    }
  } else if (json.is_object()) {
    for (auto it = json.begin(); it != json.end(); ++it) items.push_back(Value::of(Json(it.key())));
  } else if (json.is_string()) {
    for (char32_t point : decode_utf8(json.get_ref<const std::string&>())) {
      std::string character;
      append_utf8(character, point);
      items.push_back(Value::of(Json(character)));
    }
  } else {
    fail(where, str("'", type_name(value), "' object is not iterable"));
  }
  return items;
}

Value get_attribute(const Value& object, const std::string& name, const std::string& where) {
  switch (object.kind) {
    case Value::Kind::Undefined:
      fail_undefined(object, where);
    case Value::Kind::Namespace: {
      auto found = object.space->find(name);
      if (found != object.space->end()) return found->second;
      return Value::undefined(str("'Namespace' object has no attribute '", name, "'"));
    }
    case Value::Kind::Function:
      return Value::undefined(str("a function has no attribute '", name, "'"));
    case Value::Kind::Json:
      break;
  }
  const Json& json = *object.json;
  // jinja2 tries Python's getattr before the item: `message.items` is the dict's method.
  if ((json.is_object() && kDictMethods.count(name)) ||
      (json.is_string() && kStrMethods.count(name)) ||
      (json.is_array() && kListMethods.count(name))) {
    return Value::function_of(name, object.json);
  }
  if (json.is_object()) {
    auto found = json.find(name);
    if (found != json.end()) return Value::of(std::shared_ptr<const Json>(object.json, &*found));
  }
  return Value::undefined(str("'", type_name(object), " object' has no attribute '", name, "'"));
}

Value get_item(const Value& object, const Value& key, const std::string& where) {
  switch (object.kind) {
    case Value::Kind::Undefined:
      fail_undefined(object, where);
    case Value::Kind::Namespace:
      return key.is_string() ? get_attribute(object, key.json->get<std::string>(), where)
                             : Value::undefined("a namespace has no items");
    case Value::Kind::Function:
      return Value::undefined("a function has no items");
    case Value::Kind::Json:
      break;
  }
  if (key.kind == Value::Kind::Undefined) fail_undefined(key, where);
  const Json& json = *object.json;
  Number index;
  bool integral = number_of(key, index) && index.is_integer;
  if (json.is_object() && key.is_string()) {
    auto found = json.find(key.json->get<std::string>());
    if (found != json.end()) return Value::of(std::shared_ptr<const Json>(object.json, &*found));
  }
  if ((json.is_array() || json.is_string()) && integral) {
    int64_t length =
        json.is_array()
            ? static_cast<int64_t>(json.size())
            : static_cast<int64_t>(decode_utf8(json.get_ref<const std::string&>()).size());
    int64_t at = index.integer < 0 ? index.integer + length : index.integer;
    if (at >= 0 && at < length) {
      if (json.is_array()) {
        return Value::of(std::shared_ptr<const Json>(object.json, &json[static_cast<size_t>(at)]));
      }
      std::string character;
      append_utf8(character, decode_utf8(json.get_ref<const std::string&>())[at]);
      return Value::of(Json(character));
    }
    return Value::undefined(str(type_name(object), " index ", index.integer, " out of range"));
  }
  if (key.is_string()) return get_attribute(object, key.json->get<std::string>(), where);
  return Value::undefined(str("'", type_name(object), " object' has no item ", to_str(key, where)));
}

Value slice(const Value& object, const Value bounds[3], const std::string& where) {
  if (object.kind == Value::Kind::Undefined) fail_undefined(object, where);
  if (object.kind != Value::Kind::Json || !(object.json->is_array() || object.json->is_string())) {
    fail(where, str("'", type_name(object), "' object is not subscriptable with a slice"));
  }
  const Json& json = *object.json;
  std::u32string points;
  if (json.is_string()) points = decode_utf8(json.get_ref<const std::string&>());
  int64_t length =
      json.is_array() ? static_cast<int64_t>(json.size()) : static_cast<int64_t>(points.size());
  int64_t start, stop, step;
  slice_indices(bounds, length, start, stop, step, where);
  Json list = Json::array();
  std::u32string picked;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (json.is_array()) {
      list.push_back(json[static_cast<size_t>(i)]);
    } else {
      picked += points[static_cast<size_t>(i)];
    }
  }
  return json.is_array() ? Value::of(std::move(list)) : Value::of(Json(encode_utf8(picked)));
}

Value unary_arithmetic(const std::string& op, const Value& operand, const std::string& where) {
  if (operand.kind == Value::Kind::Undefined) fail_undefined(operand, where);
  Number number;
  if (!number_of(operand, number)) {
    fail(where, str("bad operand type for unary ", op, ": '", type_name(operand), "'"));
  }
  if (op == "-") {
    if (number.is_integer && number.integer == INT64_MIN) {
      fail(where, "integer overflow beyond 64 bits");
    }
    number.integer = -number.integer;
    number.real = -number.real;
  }
  return number_value(number);
}

Value binary_operator(const std::string& op, const Value& left, const Value& right,
                      const std::string& where) {
  if (op == "==") return Value::of(Json(equal(left, right)));
  if (op == "!=") return Value::of(Json(!equal(left, right)));
  if (op == "<") return Value::of(Json(compare(left, right, op, where) < 0));
  if (op == ">") return Value::of(Json(compare(left, right, op, where) > 0));
  if (op == "<=") return Value::of(Json(compare(left, right, op, where) <= 0));
  if (op == ">=") return Value::of(Json(compare(left, right, op, where) >= 0));
  if (op == "in") return Value::of(Json(contains(right, left, where)));
  if (op == "not in") return Value::of(Json(!contains(right, left, where)));
  if (op == "~") return Value::of(Json(to_str(left, where) + to_str(right, where)));
  if (left.kind == Value::Kind::Undefined) fail_undefined(left, where);
  if (right.kind == Value::Kind::Undefined) fail_undefined(right, where);
  Number x, y;
  bool numbers = number_of(left, x) && number_of(right, y);
  auto unsupported = [&]() {
    fail(where, str("unsupported operand type(s) for ", op, ": '", type_name(left), "' and '",
                    type_name(right), "'"));
  };
  if (!numbers) {
    if (left.kind != Value::Kind::Json || right.kind != Value::Kind::Json) unsupported();
    const Json &a = *left.json, &b = *right.json;
    if (op == "+" && a.is_string() && b.is_string()) {
      return Value::of(Json(a.get<std::string>() + b.get<std::string>()));
    }
    if (op == "+" && a.is_array() && b.is_array()) {
      Json joined = a;
      for (const Json& element : b) joined.push_back(element);
      return Value::of(std::move(joined));
    }
    if (op == "*" && (a.is_string() || a.is_array()) && number_of(right, y) && y.is_integer) {
      Json repeated = a.is_string() ? Json("") : Json::array();
      for (int64_t i = 0; i < y.integer; ++i) {
        if (a.is_string()) {
          repeated.get_ref<std::string&>() += a.get<std::string>();
        } else {
          for (const Json& element : a) repeated.push_back(element);
        }
      }
      return Value::of(std::move(repeated));
    }
    if (op == "%" && a.is_string()) fail(where, "string formatting with '%' is not supported");
    unsupported();
  }
  bool integers = x.is_integer && y.is_integer;
  if (integers && (op == "+" || op == "-" || op == "*")) {
    // Python's integers are unbounded: beyond 64 bits strata refuses rather than wraps.
    int64_t result;
    bool overflow = op == "+"   ? __builtin_add_overflow(x.integer, y.integer, &result)
                    : op == "-" ? __builtin_sub_overflow(x.integer, y.integer, &result)
                                : __builtin_mul_overflow(x.integer, y.integer, &result);
    if (overflow) fail(where, "integer overflow beyond 64 bits");
    return Value::of(Json(result));
  }
  if (op == "+") return Value::of(Json(x.as_real() + y.as_real()));
  if (op == "-") return Value::of(Json(x.as_real() - y.as_real()));
  if (op == "*") return Value::of(Json(x.as_real() * y.as_real()));
  if (op == "/") {
    if (y.as_real() == 0) fail(where, "division by zero");
    return Value::of(Json(x.as_real() / y.as_real()));
  }
  if (op == "//" || op == "%") {
    if (y.as_real() == 0) fail(where, "integer division or modulo by zero");
    if (integers) {
      if (x.integer == INT64_MIN && y.integer == -1) fail(where, "integer overflow beyond 64 bits");
      int64_t quotient = floor_div(x.integer, y.integer);
      return Value::of(Json(op == "//" ? quotient : x.integer - quotient * y.integer));
    }
    double quotient = std::floor(x.as_real() / y.as_real());
    return Value::of(Json(op == "//" ? quotient : x.as_real() - quotient * y.as_real()));
  }
  if (op == "**") {
    if (integers && y.integer >= 0) {
      int64_t result = 1, base = x.integer;  // by squaring, refusing what overflows
      for (int64_t exponent = y.integer; exponent > 0; exponent >>= 1) {
        if ((exponent & 1) && __builtin_mul_overflow(result, base, &result)) {
          fail(where, "integer overflow beyond 64 bits");
        }
        if (exponent > 1 && __builtin_mul_overflow(base, base, &base)) {
          fail(where, "integer overflow beyond 64 bits");
        }
      }
      return Value::of(Json(result));
    }
    return Value::of(Json(std::pow(x.as_real(), y.as_real())));
  }
  fail(where, str("unsupported operator ", op));
}

std::string decode_string_literal(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    char c = body[++i];
    auto hex_point = [&](size_t digits) -> bool {
      std::string hex(body.substr(i + 1, digits));
      if (hex.size() != digits ||
          hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
        return false;
      }
      append_utf8(out, static_cast<char32_t>(std::strtoul(hex.c_str(), nullptr, 16)));
      i += digits;
      return true;
    };
    switch (c) {
      case '\n':
        break;  // a line continuation
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        if (!hex_point(2)) out += "\\x";
        break;
      case 'u':
        if (!hex_point(4)) out += "\\u";
        break;
      case 'U':
        if (!hex_point(8)) out += "\\U";
        break;
      default:
        if (c >= '0' && c <= '7') {
          size_t end = i;
          while (end < body.size() && end < i + 3 && body[end] >= '0' && body[end] <= '7') ++end;
          append_utf8(out, static_cast<char32_t>(std::strtoul(
                               std::string(body.substr(i, end - i)).c_str(), nullptr, 8)));
          i = end - 1;
        } else {  // Python keeps an unknown escape as written
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

std::string lstrip_whitespace(std::string_view text) { return strip(text, nullptr, true, false); }
std::string rstrip_whitespace(std::string_view text) { return strip(text, nullptr, false, true); }
bool is_all_whitespace(std::string_view text) { return strip(text, nullptr, true, false).empty(); }

std::string dumps(const Json& value, int indent, bool sort_keys, bool ensure_ascii,
                  const std::string& item_separator, const std::string& key_separator) {
  std::string out;
  auto write = [&](auto& self, const Json& node, int level) -> void {
    if (node.is_null()) {
      out += "null";
    } else if (node.is_boolean()) {
      out += node.get<bool>() ? "true" : "false";
    } else if (node.is_number_unsigned()) {
      out += std::to_string(node.get<uint64_t>());
    } else if (node.is_number_integer()) {
      out += std::to_string(node.get<int64_t>());
    } else if (node.is_number_float()) {
      double real = node.get<double>();
      out += std::isnan(real)   ? "NaN"
             : std::isinf(real) ? (real < 0 ? "-Infinity" : "Infinity")
                                : float_repr(real);
    } else if (node.is_string()) {
      escape_json_string(out, node.get_ref<const std::string&>(), ensure_ascii);
    } else {
      bool is_array = node.is_array();
      if (node.empty()) {
        out += is_array ? "[]" : "{}";
        return;
      }
      std::string newline =
          indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent) * (level + 1), ' ') : "";
      out += is_array ? "[" : "{";
      out += newline;
      std::vector<std::pair<std::string, const Json*>> members;
      if (is_array) {
        for (const Json& element : node) members.emplace_back("", &element);
      } else {
        for (auto it = node.begin(); it != node.end(); ++it)
          members.emplace_back(it.key(), &it.value());
        if (sort_keys)
          std::stable_sort(members.begin(), members.end(),
                           [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      for (size_t i = 0; i < members.size(); ++i) {
        if (i) out += item_separator + newline;
        if (!is_array) {
          escape_json_string(out, members[i].first, ensure_ascii);
          out += key_separator;
        }
        self(self, *members[i].second, level + 1);
      }
      if (indent >= 0) out += "\n" + std::string(static_cast<size_t>(indent) * level, ' ');
      out += is_array ? "]" : "}";
    }
  };
  write(write, value, 0);
  return out;
}

}  // namespace strata::jinja::python
