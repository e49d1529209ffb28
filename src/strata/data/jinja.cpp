// The Jinja subset of chat templates: a lexer that applies jinja2's whitespace rules, a
// recursive-descent parser to an AST that refuses what it does not know, and an evaluator whose
// values behave as Python's. Python semantics live in jinja_python.cpp.
#include "strata/data/jinja.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "strata/data/jinja_python.h"

namespace strata::jinja {

using namespace python;

namespace {

// --- Lexing -------------------------------------------------------------------------------

enum class TokenKind { Name, String, Integer, Float, Operator, End };

struct Token {
  TokenKind kind;
  std::string text;  // the name, operator, number's digits or the decoded string
  int line;
};

enum class SegmentKind { Text, Output, Statement };

struct Segment {
  SegmentKind kind;
  std::string text;           // Text only
  std::vector<Token> tokens;  // Output and Statement: the tag's tokens, then an End token
  int line;
};

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
        // lstrip_blocks: spaces and tabs between the line's start and a block or comment tag go.
        size_t line_start = text.rfind('\n');
        line_start = line_start == std::string::npos ? 0 : line_start + 1;
        bool at_line_start = line_start > 0 || pos == 0 || source_[pos - 1] == '\n';
        if (at_line_start && line_start < text.size() &&
            is_all_whitespace(std::string_view(text).substr(line_start))) {
          text.resize(line_start);
        }
      }
      if (!text.empty()) segments.push_back({SegmentKind::Text, text, {}, line_at(pos)});
      size_t body = open + 2 + (sign == '-' || sign == '+' ? 1 : 0);
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
    return 1 + static_cast<int>(std::count(source_.begin(), source_.begin() + pos, '\n'));
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
  const std::string& name_;
};

}  // namespace

// --- The syntax tree ----------------------------------------------------------------------

struct Expr {
  enum class Kind {
    Literal,
    Name,
    List,
    Dict,
    Attribute,
    Item,
    Slice,
    Call,
    Filter,
    Test,
    Unary,
    Binary,
    Conditional
  };
  Kind kind;
  int line = 0;
  std::shared_ptr<const Json> literal;
  std::string name;                         // variable, attribute, filter, test or operator
  std::vector<std::unique_ptr<Expr>> args;  // operands; a null slot is an absent slice bound
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  bool negated = false;  // `is not`
};
using ExprPtr = std::unique_ptr<Expr>;

struct Node {
  enum class Kind { Body, Text, Output, If, For, Set, Break, Continue };
  Kind kind = Kind::Body;
  int line = 0;
  std::string text;                             // Text
  std::vector<ExprPtr> conditions;              // If: one per branch; Output, Set: the value
  std::vector<std::unique_ptr<Node>> children;  // Body: its nodes; If: branch bodies (+ else)
  std::vector<std::string> targets;             // For: loop variables; Set: name [, attribute]
  ExprPtr iterable, filter;                     // For
};
using NodePtr = std::unique_ptr<Node>;

namespace {

// --- Parsing ------------------------------------------------------------------------------

const std::set<std::string> kFilters = {
    "trim",       "length",     "count",   "tojson", "string",  "list", "join",  "items",
    "selectattr", "rejectattr", "select",  "reject", "first",   "last", "upper", "lower",
    "capitalize", "title",      "default", "d",      "replace", "safe"};
const std::set<std::string> kTests = {
    "defined",  "undefined",   "none",    "string",   "number",      "integer",
    "float",    "boolean",     "true",    "false",    "mapping",     "iterable",
    "sequence", "callable",    "equalto", "eq",       "ne",          "lt",
    "le",       "gt",          "ge",      "lessthan", "greaterthan", "odd",
    "even",     "divisibleby", "in",      "lower",    "upper"};
const std::set<std::string> kFunctions = {"raise_exception", "namespace", "strftime_now", "range"};
const std::set<std::string> kLoopAttributes = {"index", "index0", "revindex", "revindex0",
                                               "first", "last",   "length"};

class Parser {
 public:
  Parser(std::vector<Segment> segments, const std::string& name)
      : segments_(std::move(segments)), name_(name) {}

  NodePtr parse_template() {
    auto root = parse_body({});
    STRATA_REQUIRE(index_ == segments_.size(), where(segments_[index_].line), "unexpected '{% ",
                   segments_[index_].tokens[0].text, " %}'");
    return root;
  }

 private:
  std::string where(int line) const { return str(name_, " line ", line, ": "); }

  // --- statements

  // Parses nodes up to a statement named in `stops` (left unconsumed) or the end.
  NodePtr parse_body(const std::set<std::string>& stops) {
    auto body = std::make_unique<Node>();
    while (index_ < segments_.size()) {
      Segment& segment = segments_[index_];
      if (segment.kind == SegmentKind::Text) {
        auto text = std::make_unique<Node>();
        text->kind = Node::Kind::Text;
        text->text = std::move(segment.text);
        body->children.push_back(std::move(text));
        ++index_;
        continue;
      }
      tokens_ = &segment.tokens;
      position_ = 0;
      argument_start_ = SIZE_MAX;
      if (segment.kind == SegmentKind::Output) {
        auto output = std::make_unique<Node>();
        output->kind = Node::Kind::Output;
        output->line = segment.line;
        output->conditions.push_back(parse_expression());
        expect_end();
        body->children.push_back(std::move(output));
        ++index_;
        continue;
      }
      const std::string& tag = segment.tokens[0].text;
      if (stops.count(tag)) return body;
      STRATA_REQUIRE(tag != "endfor" && tag != "endif" && tag != "elif" && tag != "else" &&
                         tag != "endgeneration",
                     where(segment.line), "'{% ", tag, " %}' without its opening tag");
      ++position_;
      ++index_;
      if (tag == "if") {
        body->children.push_back(parse_if(segment.line));
      } else if (tag == "for") {
        body->children.push_back(parse_for(segment.line));
      } else if (tag == "set") {
        body->children.push_back(parse_set(segment.line));
      } else if (tag == "break" || tag == "continue") {
        expect_end();
        auto control = std::make_unique<Node>();
        control->kind = tag == "break" ? Node::Kind::Break : Node::Kind::Continue;
        body->children.push_back(std::move(control));
      } else {  // generation: transformers' assistant-mask marker, rendered as its body
        expect_end();
        body->children.push_back(parse_body({"endgeneration"}));
        close_block("endgeneration", "generation", segment.line);
      }
    }
    return body;
  }

  // Consumes `{% end %}`, the closing tag the block opened on `line` needs.
  void close_block(const std::string& end, const std::string& open, int line) {
    STRATA_REQUIRE(index_ < segments_.size(), where(line), "'{% ", open,
                   " %}' is never closed with '{% ", end, " %}'");
    tokens_ = &segments_[index_].tokens;
    position_ = 1;
    argument_start_ = SIZE_MAX;
    expect_end();
    ++index_;
  }

  // At a stop tag: its name, with the parser positioned after the name.
  std::string take_stop() {
    tokens_ = &segments_[index_].tokens;
    position_ = 1;
    argument_start_ = SIZE_MAX;
    ++index_;
    return (*tokens_)[0].text;
  }

  NodePtr parse_if(int line) {
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::If;
    node->line = line;
    node->conditions.push_back(parse_expression());
    expect_end();
    while (true) {
      node->children.push_back(parse_body({"elif", "else", "endif"}));
      STRATA_REQUIRE(index_ < segments_.size(), where(line),
                     "'{% if %}' is never closed with '{% endif %}'");
      std::string stop = take_stop();
      if (stop == "endif") {
        expect_end();
        return node;
      }
      if (stop == "elif") {
        node->conditions.push_back(parse_expression());
        expect_end();
        continue;
      }
      expect_end();  // else
      node->children.push_back(parse_body({"endif"}));
      close_block("endif", "if", line);
      return node;
    }
  }

  NodePtr parse_for(int line) {
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::For;
    node->line = line;
    do {
      node->targets.push_back(expect_name("a loop variable"));
    } while (skip_operator(","));
    STRATA_REQUIRE(skip_name("in"), where(line), "'{% for %}' needs 'in'");
    node->iterable = parse_or();  // `if` here filters the loop, not a conditional expression
    if (skip_name("if")) node->filter = parse_expression();
    STRATA_REQUIRE(!peek_name("recursive"), where(line), "unsupported construct 'recursive' loops");
    expect_end();
    node->children.push_back(parse_body({"else", "endfor"}));
    STRATA_REQUIRE(index_ < segments_.size(), where(line),
                   "'{% for %}' is never closed with '{% endfor %}'");
    if (take_stop() == "else") {
      expect_end();
      node->children.push_back(parse_body({"endfor"}));
      close_block("endfor", "for", line);
    } else {
      expect_end();
    }
    return node;
  }

  NodePtr parse_set(int line) {
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::Set;
    node->line = line;
    node->targets.push_back(expect_name("a variable to set"));
    if (skip_operator(".")) node->targets.push_back(expect_name("an attribute"));
    STRATA_REQUIRE(!peek_operator(","), where(line),
                   "unsupported construct: setting several variables at once");
    STRATA_REQUIRE(skip_operator("="), where(line),
                   "unsupported construct: a block '{% set ... %}...{% endset %}' (use "
                   "'{% set name = value %}')");
    node->conditions.push_back(parse_expression());
    expect_end();
    return node;
  }

  // --- expressions, by jinja2's precedence

  ExprPtr make(Expr::Kind kind, int line, std::string name = "") {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->line = line;
    expr->name = std::move(name);
    return expr;
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right) {
    auto expr = make(Expr::Kind::Binary, left->line, std::move(op));
    expr->args.push_back(std::move(left));
    expr->args.push_back(std::move(right));
    return expr;
  }

  ExprPtr parse_expression() {
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      auto conditional = make(Expr::Kind::Conditional, expr->line);
      conditional->args.push_back(parse_or());
      conditional->args.push_back(std::move(expr));
      conditional->args.push_back(skip_name("else") ? parse_expression() : nullptr);
      expr = std::move(conditional);
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (skip_name("or")) left = binary("or", std::move(left), parse_and());
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (skip_name("and")) left = binary("and", std::move(left), parse_not());
    return left;
  }

  ExprPtr parse_not() {
    if (peek_name("not")) {
      int line = token().line;
      ++position_;
      auto expr = make(Expr::Kind::Unary, line, "not");
      expr->args.push_back(parse_not());
      return expr;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    while (true) {
      std::string op;
      if (peek_operator("==") || peek_operator("!=") || peek_operator("<") || peek_operator(">") ||
          peek_operator("<=") || peek_operator(">=")) {
        op = token().text;
        ++position_;
      } else if (skip_name("in")) {
        op = "in";
      } else if (peek_name("not") && position_ + 1 < tokens_->size() &&
                 (*tokens_)[position_ + 1].kind == TokenKind::Name &&
                 (*tokens_)[position_ + 1].text == "in") {
        position_ += 2;
        op = "not in";
      } else {
        return left;
      }
      left = binary(op, std::move(left), parse_math1());
    }
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (peek_operator("+") || peek_operator("-")) {
      std::string op = token().text;
      ++position_;
      left = binary(op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (skip_operator("~")) left = binary("~", std::move(left), parse_math2());
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (peek_operator("*") || peek_operator("/") || peek_operator("//") || peek_operator("%")) {
      std::string op = token().text;
      ++position_;
      left = binary(op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary();
    while (skip_operator("**")) left = binary("**", std::move(left), parse_unary());
    return left;
  }

  ExprPtr parse_unary() {
    if (peek_operator("-") || peek_operator("+")) {
      auto expr = make(Expr::Kind::Unary, token().line, token().text);
      ++position_;
      expr->args.push_back(parse_unary());
      return expr;
    }
    return parse_filters(parse_postfix(parse_primary()));
  }

  ExprPtr parse_primary() {
    const Token& current = token();
    int line = current.line;
    if (current.kind == TokenKind::String) {
      std::string text;
      while (token().kind == TokenKind::String) text += (*tokens_)[position_++].text;
      auto expr = make(Expr::Kind::Literal, line);
      expr->literal = std::make_shared<const Json>(text);
      return expr;
    }
    if (current.kind == TokenKind::Integer || current.kind == TokenKind::Float) {
      auto expr = make(Expr::Kind::Literal, line);
      if (current.kind == TokenKind::Integer) {
        errno = 0;
        long long value = std::strtoll(current.text.c_str(), nullptr, 10);
        STRATA_REQUIRE(errno == 0, where(line), "integer ", current.text, " is too large");
        expr->literal = std::make_shared<const Json>(static_cast<int64_t>(value));
      } else {
        expr->literal = std::make_shared<const Json>(std::strtod(current.text.c_str(), nullptr));
      }
      ++position_;
      return expr;
    }
    if (current.kind == TokenKind::Name) {
      ++position_;
      static const std::map<std::string, Json> kConstants = {{"true", true},    {"True", true},
                                                             {"false", false},  {"False", false},
                                                             {"none", nullptr}, {"None", nullptr}};
      auto constant = kConstants.find(current.text);
      if (constant != kConstants.end()) {
        auto expr = make(Expr::Kind::Literal, line);
        expr->literal = std::make_shared<const Json>(constant->second);
        return expr;
      }
      return make(Expr::Kind::Name, line, current.text);
    }
    if (peek_operator("(")) {
      size_t open = position_++;
      ExprPtr inner = parse_expression();
      if (peek_operator(",")) {
        // A tuple acts as a list, which it resembles in all but print: so it may only be an
        // argument, as in .endswith(('a', 'b')).
        STRATA_REQUIRE(open == argument_start_, where(line),
                       "unsupported construct: a tuple outside a call's arguments");
        auto list = make(Expr::Kind::List, line, "tuple");
        list->args.push_back(std::move(inner));
        while (skip_operator(",") && !peek_operator(")")) list->args.push_back(parse_expression());
        inner = std::move(list);
      }
      expect_operator(")");
      STRATA_REQUIRE(inner->kind != Expr::Kind::List || inner->name != "tuple" ||
                         peek_operator(",") || peek_operator(")"),
                     where(line), "unsupported construct: a tuple outside a call's arguments");
      return inner;
    }
    if (skip_operator("[")) {
      auto list = make(Expr::Kind::List, line);
      while (!peek_operator("]")) {
        list->args.push_back(parse_expression());
        if (!skip_operator(",")) break;
      }
      expect_operator("]");
      return list;
    }
    if (skip_operator("{")) {
      auto dict = make(Expr::Kind::Dict, line);
      while (!peek_operator("}")) {
        dict->args.push_back(parse_expression());
        expect_operator(":");
        dict->args.push_back(parse_expression());
        if (!skip_operator(",")) break;
      }
      expect_operator("}");
      return dict;
    }
    STRATA_REQUIRE(current.kind != TokenKind::End, where(line), "an expression is missing");
    throw UserError(str(where(line), "unexpected '", current.text, "'"));
  }

  ExprPtr parse_postfix(ExprPtr expr) {
    while (true) {
      int line = token().line;
      if (skip_operator(".")) {
        std::string attribute = expect_name("an attribute name after '.'");
        if (expr->kind == Expr::Kind::Name && expr->name == "loop") {
          STRATA_REQUIRE(kLoopAttributes.count(attribute), where(line),
                         "unsupported loop attribute 'loop.", attribute,
                         "' (supported: index, index0, revindex, revindex0, first, last, length)");
        }
        auto access = make(Expr::Kind::Attribute, line, attribute);
        access->args.push_back(std::move(expr));
        expr = std::move(access);
      } else if (skip_operator("[")) {
        expr = parse_subscript(std::move(expr), line);
      } else if (peek_operator("(")) {
        expr = parse_call(std::move(expr));
      } else {
        return expr;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object, int line) {
    ExprPtr bounds[3];
    int colons = 0;
    while (!peek_operator("]")) {
      if (skip_operator(":")) {
        STRATA_REQUIRE(++colons <= 2, where(line), "a slice has at most two ':'");
        continue;
      }
      STRATA_REQUIRE(!bounds[colons], where(line), "a subscript holds one index");
      bounds[colons] = parse_expression();
    }
    expect_operator("]");
    if (colons == 0) {
      STRATA_REQUIRE(bounds[0], where(line), "an empty subscript []");
      auto item = make(Expr::Kind::Item, line);
      item->args.push_back(std::move(object));
      item->args.push_back(std::move(bounds[0]));
      return item;
    }
    auto slice = make(Expr::Kind::Slice, line);
    slice->args.push_back(std::move(object));
    for (auto& bound : bounds) slice->args.push_back(std::move(bound));
    return slice;
  }

  // Parses `(args)` into `call`'s positional args (after those it has) and kwargs.
  void parse_arguments(Expr& call) {
    expect_operator("(");
    while (!peek_operator(")")) {
      if (token().kind == TokenKind::Name && position_ + 1 < tokens_->size() &&
          (*tokens_)[position_ + 1].kind == TokenKind::Operator &&
          (*tokens_)[position_ + 1].text == "=") {
        std::string key = token().text;
        position_ += 2;
        argument_start_ = position_;
        call.kwargs.emplace_back(key, parse_expression());
      } else {
        STRATA_REQUIRE(call.kwargs.empty(), where(token().line),
                       "a positional argument after a keyword argument");
        argument_start_ = position_;
        call.args.push_back(parse_expression());
      }
      if (!skip_operator(",")) break;
    }
    expect_operator(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    int line = token().line;
    if (callee->kind == Expr::Kind::Name) {
      STRATA_REQUIRE(kFunctions.count(callee->name), where(line), "unsupported function '",
                     callee->name,
                     "()' (chat templates may call raise_exception, namespace, strftime_now, "
                     "range)");
    } else if (callee->kind == Expr::Kind::Attribute) {
      STRATA_REQUIRE(method_supported(callee->name), where(line), "unsupported method '.",
                     callee->name, "()'");
    } else {
      throw UserError(str(where(line), "unsupported construct: calling an expression"));
    }
    auto call = make(Expr::Kind::Call, line);
    call->args.push_back(std::move(callee));
    parse_arguments(*call);
    return call;
  }

  ExprPtr parse_filters(ExprPtr expr) {
    while (true) {
      int line = token().line;
      if (skip_operator("|")) {
        std::string filter = expect_name("a filter name after '|'");
        STRATA_REQUIRE(kFilters.count(filter), where(line), "unsupported filter '", filter, "'");
        auto node = make(Expr::Kind::Filter, line, filter);
        node->args.push_back(std::move(expr));
        if (peek_operator("(")) parse_arguments(*node);
        if (filter == "tojson") {
          for (auto& [key, value] : node->kwargs) {
            STRATA_REQUIRE(key == "indent" || key == "sort_keys" || key == "ensure_ascii" ||
                               key == "separators",
                           where(line), "unsupported argument '", key, "' of the tojson filter");
          }
        }
        expr = std::move(node);
      } else if (skip_name("is")) {
        bool negated = skip_name("not");
        std::string test = expect_name("a test name after 'is'");
        STRATA_REQUIRE(kTests.count(test), where(line), "unsupported test 'is ", test, "'");
        auto node = make(Expr::Kind::Test, line, test);
        node->negated = negated;
        node->args.push_back(std::move(expr));
        if (peek_operator("(")) {
          parse_arguments(*node);
        } else if (token().kind == TokenKind::String || token().kind == TokenKind::Integer ||
                   token().kind == TokenKind::Float ||
                   (token().kind == TokenKind::Name && !peek_name("else") && !peek_name("and") &&
                    !peek_name("or") && !peek_name("if"))) {
          node->args.push_back(parse_primary());  // `is divisibleby 3`
        }
        expr = std::move(node);
      } else {
        return expr;
      }
    }
  }

  // --- tokens

  const Token& token() const { return (*tokens_)[position_]; }

  bool peek_name(const char* name) const {
    return token().kind == TokenKind::Name && token().text == name;
  }
  bool peek_operator(const char* op) const {
    return token().kind == TokenKind::Operator && token().text == op;
  }
  bool skip_name(const char* name) {
    if (!peek_name(name)) return false;
    ++position_;
    return true;
  }
  bool skip_operator(const char* op) {
    if (!peek_operator(op)) return false;
    ++position_;
    return true;
  }
  void expect_operator(const char* op) {
    STRATA_REQUIRE(skip_operator(op), where(token().line), "expected '", op, "', found ",
                   describe(token()));
  }
  std::string expect_name(const char* what) {
    STRATA_REQUIRE(token().kind == TokenKind::Name, where(token().line), "expected ", what,
                   ", found ", describe(token()));
    return (*tokens_)[position_++].text;
  }
  void expect_end() {
    STRATA_REQUIRE(token().kind == TokenKind::End, where(token().line), "unexpected ",
                   describe(token()), " (a construct outside the supported subset?)");
  }
  static std::string describe(const Token& token) {
    if (token.kind == TokenKind::End) return "the end of the tag";
    if (token.kind == TokenKind::String) return "a string";
    return "'" + token.text + "'";
  }

  std::vector<Segment> segments_;
  const std::string& name_;
  size_t index_ = 0;
  const std::vector<Token>* tokens_ = nullptr;
  size_t position_ = 0;
  size_t argument_start_ = SIZE_MAX;  // where the call argument being parsed begins
};

// --- Evaluation ---------------------------------------------------------------------------

// Thrown by break and continue to the loop that runs them.
enum class Flow { Normal, Break, Continue };

struct Scope {
  std::map<std::string, Value> variables;
  const Scope* parent = nullptr;
};

class Renderer {
 public:
  Renderer(const std::string& name, std::string& out) : name_(name), out_(out) {}

  Flow run(const Node& node, Scope& scope) {
    switch (node.kind) {
      case Node::Kind::Body:
        for (const auto& child : node.children) {
          Flow flow = run(*child, scope);
          if (flow != Flow::Normal) return flow;
        }
        return Flow::Normal;
      case Node::Kind::Text:
        out_ += node.text;
        return Flow::Normal;
      case Node::Kind::Output:
        out_ += to_str(eval(*node.conditions[0], scope), where(node.line));
        return Flow::Normal;
      case Node::Kind::If:
        for (size_t i = 0; i < node.children.size(); ++i) {
          if (i == node.conditions.size() || truthy(eval(*node.conditions[i], scope))) {
            return run(*node.children[i], scope);
          }
        }
        return Flow::Normal;
      case Node::Kind::For:
        return run_for(node, scope);
      case Node::Kind::Set:
        run_set(node, scope);
        return Flow::Normal;
      case Node::Kind::Break:
        return Flow::Break;
      case Node::Kind::Continue:
        return Flow::Continue;
    }
    return Flow::Normal;
  }

 private:
  std::string where(int line) const { return str(name_, " line ", line, ": "); }

  Flow run_for(const Node& node, Scope& scope) {
    std::vector<Value> items = iterate(eval(*node.iterable, scope), where(node.line));
    auto bind = [&](Scope& into, const Value& item) {
      if (node.targets.size() == 1) {
        into.variables[node.targets[0]] = item;
        return;
      }
      std::vector<Value> parts = iterate(item, where(node.line));
      if (parts.size() != node.targets.size()) {
        throw RenderError(str(where(node.line), "cannot unpack ", parts.size(), " values into ",
                              node.targets.size(), " loop variables"),
                          "");
      }
      for (size_t i = 0; i < parts.size(); ++i) into.variables[node.targets[i]] = parts[i];
    };
    if (node.filter) {  // `for x in xs if cond`: loop.* counts the kept items only
      std::vector<Value> kept;
      for (const Value& item : items) {
        Scope probe{{}, &scope};
        bind(probe, item);
        if (truthy(eval(*node.filter, probe))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      return node.children.size() > 1 ? run(*node.children[1], scope) : Flow::Normal;
    }
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      // Each iteration is a scope of its own: a `set` inside does not outlive the iteration
      // (jinja2's rule, which is why templates carry state in a namespace).
      Scope iteration{{}, &scope};
      bind(iteration, items[i]);
      Json loop = {{"index", i + 1},         {"index0", i},
                   {"revindex", length - i}, {"revindex0", length - i - 1},
                   {"first", i == 0},        {"last", i == length - 1},
                   {"length", length}};
      iteration.variables["loop"] = Value::of(std::move(loop));
      if (run(*node.children[0], iteration) == Flow::Break) break;
    }
    return Flow::Normal;
  }

  void run_set(const Node& node, Scope& scope) {
    Value value = eval(*node.conditions[0], scope);
    if (node.targets.size() == 1) {
      scope.variables[node.targets[0]] = std::move(value);
      return;
    }
    Value target = lookup(node.targets[0], scope);
    if (target.kind != Value::Kind::Namespace) {
      throw RenderError(str(where(node.line), "cannot set '", node.targets[0], ".", node.targets[1],
                            "': '", node.targets[0], "' is not a namespace"),
                        "");
    }
    (*target.space)[node.targets[1]] = std::move(value);
  }

  Value lookup(const std::string& name, const Scope& scope) const {
    for (const Scope* at = &scope; at; at = at->parent) {
      auto found = at->variables.find(name);
      if (found != at->variables.end()) return found->second;
    }
    if (kFunctions.count(name)) return Value::function_of(name);
    return Value::undefined(str("'", name, "' is undefined"));
  }

  std::vector<std::pair<std::string, Value>> eval_kwargs(const Expr& expr, const Scope& scope) {
    std::vector<std::pair<std::string, Value>> kwargs;
    for (const auto& [key, value] : expr.kwargs) kwargs.emplace_back(key, eval(*value, scope));
    return kwargs;
  }

  std::vector<Value> eval_args(const Expr& expr, const Scope& scope, size_t first) {
    std::vector<Value> args;
    for (size_t i = first; i < expr.args.size(); ++i) args.push_back(eval(*expr.args[i], scope));
    return args;
  }

  Value eval(const Expr& expr, const Scope& scope) {
    const std::string here = where(expr.line);
    switch (expr.kind) {
      case Expr::Kind::Literal:
        return Value::of(expr.literal);
      case Expr::Kind::Name:
        return lookup(expr.name, scope);
      case Expr::Kind::List: {
        Json list = Json::array();
        for (const auto& element : expr.args) {
          list.push_back(to_json(eval(*element, scope), here));
        }
        return Value::of(std::move(list));
      }
      case Expr::Kind::Dict: {
        Json dict = Json::object();
        for (size_t i = 0; i + 1 < expr.args.size(); i += 2) {
          Value key = eval(*expr.args[i], scope);
          if (!key.is_string()) throw RenderError(here + "dict keys must be strings", "");
          dict[key.json->get<std::string>()] = to_json(eval(*expr.args[i + 1], scope), here);
        }
        return Value::of(std::move(dict));
      }
      case Expr::Kind::Attribute:
        return get_attribute(eval(*expr.args[0], scope), expr.name, here);
      case Expr::Kind::Item:
        return get_item(eval(*expr.args[0], scope), eval(*expr.args[1], scope), here);
      case Expr::Kind::Slice: {
        Value bounds[3];
        for (int i = 0; i < 3; ++i) {
          if (expr.args[i + 1]) bounds[i] = eval(*expr.args[i + 1], scope);
        }
        return slice(eval(*expr.args[0], scope), bounds, here);
      }
      case Expr::Kind::Call: {
        Value callee = eval(*expr.args[0], scope);
        return call(callee, eval_args(expr, scope, 1), eval_kwargs(expr, scope), here);
      }
      case Expr::Kind::Filter:
        return apply_filter(expr.name, eval(*expr.args[0], scope), eval_args(expr, scope, 1),
                            eval_kwargs(expr, scope), here);
      case Expr::Kind::Test: {
        bool result =
            apply_test(expr.name, eval(*expr.args[0], scope), eval_args(expr, scope, 1), here);
        return Value::of(Json(result != expr.negated));
      }
      case Expr::Kind::Unary: {
        Value operand = eval(*expr.args[0], scope);
        if (expr.name == "not") return Value::of(Json(!truthy(operand)));
        return unary_arithmetic(expr.name, operand, here);
      }
      case Expr::Kind::Binary: {
        Value left = eval(*expr.args[0], scope);
        if (expr.name == "and") return truthy(left) ? eval(*expr.args[1], scope) : left;
        if (expr.name == "or") return truthy(left) ? left : eval(*expr.args[1], scope);
        return binary_operator(expr.name, left, eval(*expr.args[1], scope), here);
      }
      case Expr::Kind::Conditional:
        if (truthy(eval(*expr.args[0], scope))) return eval(*expr.args[1], scope);
        if (expr.args[2]) return eval(*expr.args[2], scope);
        return Value::undefined("the conditional expression has no else");
    }
    return Value::undefined("");
  }

  const std::string& name_;
  std::string& out_;
};

}  // namespace

Template::Template(std::string_view source, std::string name) : name_(std::move(name)) {
  root_ = Parser(Lexer(source, name_).run(), name_).parse_template();
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Json& context) const {
  STRATA_REQUIRE(context.is_object(), name_, ": the context of a template is a JSON object");
  auto shared = std::make_shared<const Json>(context);
  Scope globals;
  for (auto it = shared->begin(); it != shared->end(); ++it) {
    globals.variables[it.key()] = Value::of(std::shared_ptr<const Json>(shared, &it.value()));
  }
  std::string out;
  Renderer(name_, out).run(*root_, globals);
  return out;
}

}  // namespace strata::jinja
