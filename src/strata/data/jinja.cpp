// The renderer of the Jinja subset: walks the tree jinja_parser.cpp built, with jinja2's scoping
// (each loop iteration a scope of its own), loop controls and the loop variable. What values do
// is Python's, in jinja_python.cpp and jinja_builtins.cpp.
#include "strata/data/jinja.h"

#include <map>
#include <vector>

#include "strata/data/jinja_python.h"
#include "strata/data/jinja_syntax.h"

namespace strata::jinja {

using namespace python;

namespace {

// --- Evaluation ---------------------------------------------------------------------------

// How a body ended: normally, or at a break or continue that its loop must act on.
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
    if (is_global_function(name)) return Value::function_of(name);
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
  root_ = parse(lex(source, name_), name_);
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
