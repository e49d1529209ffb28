// The lexer of the Jinja subset: text and tags, with jinja2's whitespace control as
// transformers configures it (trim_blocks and lstrip_blocks on).
#include <algorithm>
#include <cctype>
#include <set>

#include "strata/data/jinja_python.h"
#include "strata/data/jinja_syntax.h"

namespace strata::jinja {

using namespace python;

namespace {

const std::set<std::string> kSupportedTags = {"for",      "endfor",     "if",           "elif",
                                              "else",     "endif",      "set",          "break",
                                              "continue", "generation", "endgeneration"};

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& name) : name_(name) {
    // jinja2 normalizes line endings to \n and drops one final newline (keep_trailing_newline
    // is off in apply_chat_template).
    source_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        source_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        source_ += source[i];
      }
    }
    if (!source_.empty() && source_.back() == '\n') source_.pop_back();
    for (size_t i = 0; i < source_.size(); ++i) {
      if (source_[i] == '\n') newlines_.push_back(i);
    }
  }

  std::vector<Segment> run() {
    std::vector<Segment> segments;
    size_t pos = 0;
    bool strip_leading = false;  // the previous tag ended with '-'
    while (pos <= source_.size()) {
      size_t open = source_.find('{', pos);
      while (open != std::string::npos && open + 1 < source_.size() && source_[open + 1] != '{' &&
             source_[open + 1] != '%' && source_[open + 1] != '#') {
        open = source_.find('{', open + 1);
      }
      if (open != std::string::npos && open + 1 >= source_.size()) open = std::string::npos;
      std::string text =
          source_.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
      if (strip_leading) text = lstrip_whitespace(text);
      strip_leading = false;
      if (open == std::string::npos) {
        if (!text.empty()) segments.push_back({SegmentKind::Text, text, {}, line_at(pos)});
        break;
      }
      char kind = source_[open + 1];
      char sign = open + 2 < source_.size() ? source_[open + 2] : '\0';
      if (sign == '-') {
        text = rstrip_whitespace(text);
      } else if (kind != '{' && sign != '+') {
        // lstrip_blocks: whitespace between the line's start and a block or comment tag goes.
        size_t line_start = text.rfind('\n');
        line_start = line_start == std::string::npos ? 0 : line_start + 1;
        bool at_line_start = line_start > 0 || pos == 0 || source_[pos - 1] == '\n';
        if (at_line_start && line_start < text.size() &&
            is_all_whitespace(std::string_view(text).substr(line_start))) {
          text.resize(line_start);
        }
      }
      if (!text.empty()) segments.push_back({SegmentKind::Text, text, {}, line_at(pos)});
      // '+' marks only block and comment tags: in {{+x}} it is the unary plus.
      size_t body = open + 2 + (sign == '-' || (sign == '+' && kind != '{') ? 1 : 0);
      if (kind == '#') {
        size_t close = source_.find("#}", body);
        STRATA_REQUIRE(close != std::string::npos, where(line_at(open)),
                       "a comment {# is never closed with #}");
        char end_sign = close > body ? source_[close - 1] : '\0';
        pos = close + 2;
        if (end_sign == '-') {
          strip_leading = true;
        } else if (end_sign != '+' && pos < source_.size() && source_[pos] == '\n') {
          ++pos;  // trim_blocks
        }
        continue;
      }
      Segment tag{
          kind == '{' ? SegmentKind::Output : SegmentKind::Statement, "", {}, line_at(open)};
      char end_sign = '\0';
      pos = lex_tag(body, kind == '{' ? "}}" : "%}", tag, end_sign);
      if (end_sign == '-') {
        strip_leading = true;
      } else if (kind == '%' && end_sign != '+' && pos < source_.size() && source_[pos] == '\n') {
        ++pos;  // trim_blocks
      }
      if (tag.kind == SegmentKind::Statement) check_tag(tag);
      segments.push_back(std::move(tag));
    }
    return segments;
  }

 private:
  std::string where(int line) const { return str(name_, " line ", line, ": "); }

  int line_at(size_t pos) const {
    return 1 + static_cast<int>(std::lower_bound(newlines_.begin(), newlines_.end(), pos) -
                                newlines_.begin());
  }

  // Refuses an unknown tag here rather than in the parser: the body of {% raw %} or
  // {% macro %} may not even lex.
  void check_tag(const Segment& tag) const {
    const Token& first = tag.tokens.front();
    STRATA_REQUIRE(first.kind == TokenKind::Name, where(tag.line), "a tag {% %} without a name");
    STRATA_REQUIRE(first.text != "endset", where(tag.line),
                   "unsupported construct: a block '{% set name %}...{% endset %}' (use "
                   "'{% set name = value %}')");
    STRATA_REQUIRE(kSupportedTags.count(first.text), where(tag.line), "unsupported tag '{% ",
                   first.text,
                   " %}' (chat templates may use for, if/elif/else, set, break, continue)");
  }

  // Lexes a tag's tokens from `pos` to its closing delimiter at bracket depth 0; returns the
  // position after it and the sign ('-', '+' or none) before it.
  size_t lex_tag(size_t pos, const std::string& close, Segment& tag, char& end_sign) {
    int depth = 0;
    while (true) {
      while (pos < source_.size() &&
             std::string_view(" \t\n\r\f\v").find(source_[pos]) != std::string_view::npos) {
        ++pos;
      }
      int line = line_at(pos);
      STRATA_REQUIRE(pos < source_.size(), where(tag.line), "the tag opened here is never closed");
      std::string_view rest = std::string_view(source_).substr(pos);
      if (depth == 0) {
        for (char sign : {'-', '+'}) {
          if (rest.size() > close.size() && rest[0] == sign && rest.substr(1, 2) == close &&
              (sign == '-' || close == "%}")) {
            end_sign = sign;
            tag.tokens.push_back({TokenKind::End, "", line});
            return pos + 3;
          }
        }
        if (rest.substr(0, 2) == close) {
          tag.tokens.push_back({TokenKind::End, "", line});
          return pos + 2;
        }
      }
      char c = rest[0];
      if (c == '\'' || c == '"') {
        size_t end = 1;
        while (end < rest.size() && rest[end] != c) end += rest[end] == '\\' ? 2 : 1;
        STRATA_REQUIRE(end < rest.size(), where(line), "a string literal is never closed");
        tag.tokens.push_back(
            {TokenKind::String, decode_string_literal(rest.substr(1, end - 1)), line});
        pos += end + 1;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t end = 0;
        bool is_float = false;
        while (end < rest.size() &&
               (std::isdigit(static_cast<unsigned char>(rest[end])) || rest[end] == '_')) {
          ++end;
        }
        if (end + 1 < rest.size() && rest[end] == '.' &&
            std::isdigit(static_cast<unsigned char>(rest[end + 1]))) {
          is_float = true;
          ++end;
          while (end < rest.size() && std::isdigit(static_cast<unsigned char>(rest[end]))) ++end;
        }
        if (end < rest.size() && (rest[end] == 'e' || rest[end] == 'E')) {
          size_t exponent = end + 1;
          if (exponent < rest.size() && (rest[exponent] == '+' || rest[exponent] == '-')) {
            ++exponent;
          }
          if (exponent < rest.size() && std::isdigit(static_cast<unsigned char>(rest[exponent]))) {
            is_float = true;
            end = exponent;
            while (end < rest.size() && std::isdigit(static_cast<unsigned char>(rest[end]))) ++end;
          }
        }
        std::string digits(rest.substr(0, end));
        digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
        tag.tokens.push_back({is_float ? TokenKind::Float : TokenKind::Integer, digits, line});
        pos += end;
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = 0;
        while (end < rest.size() &&
               (std::isalnum(static_cast<unsigned char>(rest[end])) || rest[end] == '_')) {
          ++end;
        }
        tag.tokens.push_back({TokenKind::Name, std::string(rest.substr(0, end)), line});
        pos += end;
      } else {
        static const char* const kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                                 "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                                 "]",  "{",  "}",  ",",  ".",  ":",  "|"};
        const char* matched = nullptr;
        for (const char* op : kOperators) {
          if (rest.substr(0, std::char_traits<char>::length(op)) == op) {
            matched = op;
            break;
          }
        }
        STRATA_REQUIRE(matched, where(line), "unexpected character '", c, "' in a tag");
        std::string op = matched;
        if (op == "(" || op == "[" || op == "{") ++depth;
        if (op == ")" || op == "]" || op == "}") --depth;
        tag.tokens.push_back({TokenKind::Operator, op, line});
        pos += op.size();
      }
    }
  }

  std::string source_;
  std::vector<size_t> newlines_;  // their positions in source_, for line numbers
  const std::string& name_;
};

}  // namespace

std::vector<Segment> lex(std::string_view source, const std::string& name) {
  return Lexer(source, name).run();
}

}  // namespace strata::jinja
