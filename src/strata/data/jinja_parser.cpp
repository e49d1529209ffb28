// The parser of the Jinja subset: recursive descent in jinja2's precedence, refusing every
// filter, test, method, function and attribute of `loop` it does not implement, by name and line.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>

#include "strata/data/jinja_python.h"
#include "strata/data/jinja_syntax.h"

namespace strata::jinja {

using namespace python;

namespace {

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

}  // namespace

std::unique_ptr<Node> parse(std::vector<Segment> segments, const std::string& name) {
  return Parser(std::move(segments), name).parse_template();
}

bool is_global_function(const std::string& name) { return kFunctions.count(name) > 0; }

}  // namespace strata::jinja
