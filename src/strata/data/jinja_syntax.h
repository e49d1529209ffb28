// The syntax of the Jinja subset (jinja.h), shared by its lexer, parser and renderer: the
// lexer cuts a template into text and tags (whitespace control applied), the parser turns them
// into a tree of Nodes and Exprs, refusing what the subset lacks.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/data/jinja.h"

namespace strata::jinja {

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

// The template's text and tags, with jinja2's whitespace rules applied to the text (trim_blocks,
// lstrip_blocks, the - and + markers, the final newline dropped). Refuses unknown tags.
std::vector<Segment> lex(std::string_view source, const std::string& name);

// An expression. args by kind: Attribute, Item: the object (and the index); Slice: the object,
// start, stop, step; Call: the callee, then positional arguments; Filter, Test: the input, then
// arguments; Unary: the operand; Binary: both; Conditional: condition, value, else (or null).
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

// A statement, or text to copy, or a body of them. For: children[0] is the loop body,
// children[1] the else body if any.
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

// The tree of a lexed template; throws UserError for what the subset lacks.
std::unique_ptr<Node> parse(std::vector<Segment> segments, const std::string& name);

// The functions a template may call by name: raise_exception, namespace, strftime_now, range.
bool is_global_function(const std::string& name);

}  // namespace strata::jinja
