// Rendering a parsed chat template (see chat_template.h): expressions are evaluated with
// Python's semantics (chat_template_values.h), statements write into one output string.
#include <climits>
#include <cmath>
#include <unordered_map>

#include "trireme/io/chat_template.h"
#include "trireme/io/chat_template_builtins.h"
#include "trireme/io/config.h"

namespace trireme::io {

namespace jinja {
namespace {

// What a body's execution ends with: normally, or at {% break %} / {% continue %}.
enum class Flow { normal, loop_break, loop_continue };

class Renderer {
 public:
  Renderer(const std::string& origin, const Json& context) : origin_(origin) {
    scopes_.emplace_back();
    for (const auto& [k, v] : context.items()) scopes_.back()[k] = Value::of(v);
  }

  std::string run(const Body& body) {
    std::string out;
    exec(body, out);
    return out;
  }

 private:
  const std::string& origin_;
  std::vector<std::unordered_map<std::string, Value>> scopes_;  // innermost last
  int64_t iterations_ = 0;
  int loop_depth_ = 0;
  int64_t work_ = 0;  // nodes of the values built so far (node_count): bounds time and memory

  // Counts the building of `v`, refusing a template that builds too much.
  const Value& charge(const Value& v, Pos p) {
    if (v.kind == Value::Kind::undefined) return v;
    work_ += node_count(v.json());
    if (work_ > kMaxWork) fail(p, str_cat("the template builds more than ", kMaxWork, " values and string pieces"));
    return v;
  }

  [[noreturn]] void fail(Pos p, const std::string& what) const {
    throw ConfigError(str_cat(origin_, " line ", p.line, " column ", p.column, ": ", what));
  }
  void check_size(size_t bytes, Pos p) const {
    if (bytes > kMaxOutputBytes) fail(p, str_cat("the rendering exceeds ", kMaxOutputBytes >> 20, " MiB"));
  }

  // ---- statements

  Flow exec(const Body& body, std::string& out) {
    for (const Node& n : body) {
      const Flow f = exec(n, out);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  Flow exec(const Node& n, std::string& out) {
    try {
      return exec_unchecked(n, out);
    } catch (const EvalError& e) {  // from printing a value: too deep
      fail(n.pos, e.what());
    }
  }

  Flow exec_unchecked(const Node& n, std::string& out) {
    switch (n.kind) {
      case NodeKind::text: out += n.text; break;
      case NodeKind::output: out += to_str(eval(*n.expr)); break;
      case NodeKind::if_chain:
        for (const auto& [cond, body] : n.branches)
          if (!cond || truthy(eval(*cond))) return exec(body, out);
        break;
      case NodeKind::for_loop: run_loop(n, out); break;
      case NodeKind::set: assign(n, eval(*n.expr)); break;
      case NodeKind::set_block: {
        std::string captured;
        exec(n.body, captured);
        assign(n, Value::of(std::move(captured)));
        break;
      }
      case NodeKind::loop_break:
      case NodeKind::loop_continue:
        if (loop_depth_ == 0) fail(n.pos, "'{% break %}' or '{% continue %}' outside a loop");
        return n.kind == NodeKind::loop_break ? Flow::loop_break : Flow::loop_continue;
    }
    check_size(out.size(), n.pos);
    return Flow::normal;
  }

  void assign(const Node& n, Value v) {
    if (n.attribute.empty()) {
      scopes_.back()[n.targets[0]] = std::move(v);
      return;
    }
    const Value target = lookup(n.targets[0]);
    if (target.kind != Value::Kind::ns)
      fail(n.pos, str_cat("'{% set ", n.targets[0], ".", n.attribute, " %}' needs ", n.targets[0],
                          " to be a namespace(), got ", type_name(target)));
    (*target.ns)[n.attribute] = charge(v, n.pos).json();
  }

  // `item` is an element of `items` (shared, not copied).
  void bind(const Node& n, const Value& items, const Json& item) {
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = items.element(item);
      return;
    }
    if (!item.is_array() || item.size() != n.targets.size())
      fail(n.pos, str_cat("cannot unpack ", repr(item), " into ", n.targets.size(), " loop variables"));
    for (size_t i = 0; i < n.targets.size(); ++i) scopes_.back()[n.targets[i]] = items.element(item[i]);
  }

  // Each iteration runs in a scope of its own: what it sets is gone after it, as in Jinja.
  struct Scope {
    Renderer& r;
    explicit Scope(Renderer& renderer) : r(renderer) { r.scopes_.emplace_back(); }
    ~Scope() { r.scopes_.pop_back(); }
  };

  void run_loop(const Node& n, std::string& out) {
    Value items;
    try {
      // A list of its own: the body may rebind what the expression refers to.
      items = charge(apply_filter("list", eval(*n.expr), {}), n.expr->pos);
    } catch (const EvalError& e) {
      fail(n.expr->pos, str_cat("cannot loop over it: ", e.what()));
    }
    if (n.filter) {
      Json kept = Json::array();
      for (const Json& item : items.json()) {
        count_iteration(n.pos);
        Scope s(*this);
        bind(n, items, item);
        if (truthy(eval(*n.filter))) kept.push_back(item);
      }
      items = charge(Value::of(std::move(kept)), n.pos);
    }
    const Json& list = items.json();
    if (list.empty()) {
      exec(n.else_body, out);
      return;
    }
    ++loop_depth_;
    const int64_t len = int64_t(list.size());
    for (int64_t i = 0; i < len; ++i) {
      count_iteration(n.pos);
      Scope s(*this);
      scopes_.back()["loop"] = Value::of({{"index", i + 1}, {"index0", i}, {"revindex", len - i},
                                          {"revindex0", len - i - 1}, {"first", i == 0}, {"last", i == len - 1},
                                          {"length", len}});
      bind(n, items, list[size_t(i)]);
      const Flow f = exec(n.body, out);
      if (f == Flow::loop_break) break;
    }
    --loop_depth_;
  }

  void count_iteration(Pos p) {
    if (++iterations_ > kMaxLoopIterations) fail(p, str_cat("more than ", kMaxLoopIterations, " loop iterations"));
  }

  // ---- expressions

  Value lookup(const std::string& name) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
      auto it = s->find(name);
      if (it != s->end()) return it->second;
    }
    return Value::undefined(name);
  }

  Args eval_args(const Expr& e, size_t first) {
    Args a;
    for (size_t i = first; i < e.args.size(); ++i) a.positional.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) a.named.emplace_back(k, eval(*v));
    return a;
  }

  Value eval(const Expr& e) {
    try {
      Value v = eval_unchecked(e);
      // What builds a new value is charged for it; names and members share their storage.
      if (e.kind != ExprKind::name && e.kind != ExprKind::attr && e.kind != ExprKind::item) charge(v, e.pos);
      return v;
    } catch (const EvalError& err) {
      fail(e.pos, err.what());
    }
  }

  Value eval_unchecked(const Expr& e) {
    switch (e.kind) {
      case ExprKind::literal: return Value::of(e.value);
      case ExprKind::name: return lookup(e.name);
      case ExprKind::list: {
        Json out = Json::array();
        for (const auto& a : e.args) out.push_back(eval(*a).json());
        return Value::of(std::move(out));
      }
      case ExprKind::dict: {
        Json out = Json::object();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = eval(*e.args[i]);
          out[to_string_ref(k, "a dict key")] = eval(*e.args[i + 1]).json();
        }
        return Value::of(std::move(out));
      }
      case ExprKind::attr: return member(eval(*e.args[0]), Value::of(e.name), e.pos);
      case ExprKind::item: return member(eval(*e.args[0]), eval(*e.args[1]), e.pos);
      case ExprKind::slice: return slice(e);
      case ExprKind::call: return call(e);
      case ExprKind::filter: {
        // Work on a value costs about its size, and is charged so (the length of a list is free).
        const Value subject = eval(*e.args[0]);
        if (!((e.name == "length" || e.name == "count") && subject.json().is_structured())) charge(subject, e.pos);
        return apply_filter(e.name, subject, eval_args(e, 1));
      }
      case ExprKind::test: {
        const Value subject = eval(*e.args[0]);
        const Args args = eval_args(e, 1);
        for (const char* comparing : {"eq", "equalto", "==", "ne", "!=", "in"})
          if (e.name == comparing) charge(subject, e.pos);
        return Value::of(apply_test(e.name, subject, args) != e.negated);
      }
      case ExprKind::unary: {
        const Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::of(!truthy(v));
        if (v.kind != Value::Kind::data || !v.json().is_number())
          throw EvalError(str_cat("unary '", e.name, "' needs a number, got ", type_name(v)));
        if (e.name == "+") return v;
        if (v.json().is_number_integer() && v.json().get<int64_t>() == INT64_MIN) throw EvalError("integer overflow in -");
        return Value::of(v.json().is_number_float() ? Json(-v.json().get<double>()) : Json(-v.json().get<int64_t>()));
      }
      case ExprKind::binary: return binary(e);
      case ExprKind::compare: return compare_chain(e);
      case ExprKind::cond:
        if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("the else branch");
    }
    return Value::undefined("?");
  }

  // object.name and object[key]: a missing key or index is undefined; so is any attribute of a
  // value that has none. Reading into an undefined value is an error, as in Jinja.
  Value member(const Value& object, const Value& key, Pos pos) {
    if (object.is_undefined()) throw EvalError(str_cat("'", object.what, "' is undefined"));
    const Json& j = object.json();
    const Json& k = key.json();
    // A part of data is shared; a namespace's attribute is copied, as the namespace can change.
    auto part = [&](const Json& p) {
      return object.kind == Value::Kind::data ? object.element(p) : charge(Value::of(p), pos);
    };
    if (j.is_object() && k.is_string()) {
      auto it = j.find(k.get<std::string>());
      return it == j.end() ? Value::undefined(k.get<std::string>()) : part(*it);
    }
    if ((j.is_array() || j.is_string()) && k.is_number_integer()) {
      const int64_t n = length(object);
      int64_t i = k.get<int64_t>();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(str_cat("index ", k.get<int64_t>()));
      if (j.is_array()) return part(j[size_t(i)]);
      return Value::of(utf8_slice(j.get_ref<const std::string&>(), i, i + 1, 1));
    }
    return Value::undefined(to_str(key));
  }

  Value slice(const Expr& e) {
    const Value object = eval(*e.args[0]);
    std::optional<int64_t> bound[3];
    for (int b = 0; b < 3; ++b) {
      if (!e.args[size_t(b) + 1]) continue;
      const Value v = eval(*e.args[size_t(b) + 1]);
      if (!v.is_undefined() && !v.json().is_null()) bound[b] = to_integer(v, "a slice bound");
    }
    const int64_t step = bound[2].value_or(1);
    if (step == 0) throw EvalError("slice step cannot be zero");
    const Json& j = object.json();
    if (object.kind == Value::Kind::data && j.is_array()) return Value::of(list_slice(j, bound[0], bound[1], step));
    if (object.kind == Value::Kind::data && j.is_string())
      return Value::of(utf8_slice(j.get_ref<const std::string&>(), bound[0], bound[1], step));
    throw EvalError(str_cat("cannot slice a ", type_name(object)));
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.kind == ExprKind::attr) {
      const Value object = eval(*callee.args[0]);
      charge(object, e.pos);
      return call_method(object, callee.name, eval_args(e, 1));
    }
    if (callee.kind != ExprKind::name || !lookup(callee.name).is_undefined())
      throw EvalError("only the functions raise_exception, namespace, range and dict, and methods, can be called");
    const Args a = eval_args(e, 1);
    const std::string& f = callee.name;
    if (f == "raise_exception") {
      const Value* msg = a.get(0, "message");
      fail(e.pos, str_cat("the template raised an error: ", msg ? to_str(*msg) : std::string()));
    }
    if (f == "namespace" || f == "dict") {
      Json fields = Json::object();
      if (!a.positional.empty()) {
        if (!a.positional[0].json().is_object()) throw EvalError(f + ": expected keyword arguments or a mapping");
        fields = a.positional[0].json();
      }
      for (const auto& [k, v] : a.named) fields[k] = v.json();
      if (f == "dict") return Value::of(std::move(fields));
      return {Value::Kind::ns, nullptr, std::make_shared<Json>(std::move(fields)), {}};
    }
    if (f == "range") {
      if (a.positional.empty() || a.positional.size() > 3) throw EvalError("range: expected 1 to 3 integers");
      int64_t start = 0, stop = 0, step = 1;
      if (a.positional.size() == 1) {
        stop = to_integer(a.positional[0], "range");
      } else {
        start = to_integer(a.positional[0], "range"), stop = to_integer(a.positional[1], "range");
        if (a.positional.size() == 3) step = to_integer(a.positional[2], "range");
      }
      if (step == 0) throw EvalError("range: step cannot be zero");
      Json out = Json::array();
      for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        if (int64_t(out.size()) >= kMaxLoopIterations) throw EvalError("range: too many items");
        out.push_back(i);
        if (__builtin_add_overflow(i, step, &i)) break;
      }
      return Value::of(std::move(out));
    }
    throw EvalError(str_cat("'", f, "' is undefined: the functions are raise_exception, namespace, range and dict"));
  }

  Value arithmetic(const std::string& op, const Json& x, const Json& y) {
    const bool ints = x.is_number_integer() && y.is_number_integer();
    const double a = x.get<double>(), b = y.get<double>();
    if (op == "+" || op == "-" || op == "*") {
      if (ints) {
        int64_t r = 0, p = x.get<int64_t>(), q = y.get<int64_t>();
        const bool overflow = op == "+" ? __builtin_add_overflow(p, q, &r)
                              : op == "-" ? __builtin_sub_overflow(p, q, &r)
                                          : __builtin_mul_overflow(p, q, &r);
        if (overflow) throw EvalError(str_cat("integer overflow in ", p, " ", op, " ", q));
        return Value::of(r);
      }
      return Value::of(op == "+" ? a + b : op == "-" ? a - b : a * b);
    }
    if (op == "**") {
      if (ints && y.get<int64_t>() >= 0) {
        int64_t r = 1;
        for (int64_t i = 0, p = x.get<int64_t>(); i < y.get<int64_t>(); ++i)
          if (__builtin_mul_overflow(r, p, &r)) throw EvalError("integer overflow in **");
        return Value::of(r);
      }
      return Value::of(std::pow(a, b));
    }
    if (b == 0) throw EvalError("division by zero");
    if (op == "/") return Value::of(a / b);
    if (ints) {  // Python's floor division and modulo
      const int64_t p = x.get<int64_t>(), q = y.get<int64_t>();
      if (p == INT64_MIN && q == -1) throw EvalError("integer overflow in //");
      int64_t d = p / q, m = p % q;
      if (m != 0 && ((m < 0) != (q < 0))) --d, m += q;
      return Value::of(op == "//" ? d : m);
    }
    const double d = std::floor(a / b);
    return Value::of(op == "//" ? d : a - d * b);
  }

  static bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "in" || op == "not in") return apply_test("contained", b, Args{{a}, {}}) == (op == "in");
    const auto lt = op == "<" || op == ">=" ? less(a, b) : less(b, a);
    if (!lt) throw EvalError(str_cat("cannot compare a ", type_name(a), " with a ", type_name(b), " by '", op, "'"));
    return op == "<" || op == ">" ? *lt : !*lt;
  }

  // a < b <= c is a < b and b <= c, each operand evaluated once, stopping at the first false.
  Value compare_chain(const Expr& e) {
    Value left = eval(*e.args[0]);
    charge(left, e.pos);
    for (size_t i = 0; i < e.ops.size(); ++i) {
      Value right = eval(*e.args[i + 1]);
      charge(right, e.pos);
      if (!compare(e.ops[i], left, right)) return Value::of(false);
      left = std::move(right);
    }
    return Value::of(true);
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    const Value a = eval(*e.args[0]);
    if (op == "and") return truthy(a) ? eval(*e.args[1]) : a;
    if (op == "or") return truthy(a) ? a : eval(*e.args[1]);
    const Value b = eval(*e.args[1]);
    if (op == "~") {
      std::string s = to_str(a);
      const std::string t = to_str(b);
      check_size(s.size() + t.size(), e.pos);
      return Value::of(std::move(s += t));
    }
    const Json& x = a.json();
    const Json& y = b.json();
    const bool data = a.kind == Value::Kind::data && b.kind == Value::Kind::data;
    if (data && x.is_number() && y.is_number()) return arithmetic(op, x, y);
    if (data && op == "+" && x.is_string() && y.is_string()) {
      check_size(x.get_ref<const std::string&>().size() + y.get_ref<const std::string&>().size(), e.pos);
      return Value::of(x.get<std::string>() + y.get_ref<const std::string&>());
    }
    if (data && op == "+" && x.is_array() && y.is_array()) {
      Json out = x;
      out.insert(out.end(), y.begin(), y.end());
      return Value::of(std::move(out));
    }
    if (data && op == "*" && x.is_string() && y.is_number_integer()) {
      const int64_t n = std::max<int64_t>(0, y.get<int64_t>());
      check_size(size_t(double(n) * double(x.get_ref<const std::string&>().size())), e.pos);
      std::string s;
      for (int64_t i = 0; i < n; ++i) s += x.get_ref<const std::string&>();
      return Value::of(std::move(s));
    }
    if (a.is_undefined() || b.is_undefined())
      throw EvalError(str_cat("'", (a.is_undefined() ? a : b).what, "' is undefined (in '", op, "')"));
    throw EvalError(str_cat("unsupported operand types for '", op, "': ", type_name(a), " and ", type_name(b)));
  }
};

}  // namespace
}  // namespace jinja

ChatTemplate::ChatTemplate(const std::string& source, std::string origin)
    : body_(std::make_shared<const jinja::Body>(jinja::parse_template(source, origin))), origin_(std::move(origin)) {}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  TRIREME_CHECK(context.is_object(), "ChatTemplate::render: the context must be an object");
  return jinja::Renderer(origin_, context).run(*body_);
}

std::string ChatTemplate::render_conversation(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                              const std::string& bos_token, const std::string& eos_token) const {
  return render({{"messages", messages},
                 {"add_generation_prompt", add_generation_prompt},
                 {"bos_token", bos_token},
                 {"eos_token", eos_token}});
}

}  // namespace trireme::io
