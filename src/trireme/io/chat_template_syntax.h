// The parsed form of a chat template (io/chat_template.h): expression and statement trees that
// chat_template_parse.cpp builds and chat_template_render.cpp walks. Internal to those files.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace trireme::io::jinja {

// ordered_json keeps an object's keys in insertion order, as Python dicts (and so tojson) do.
using Json = nlohmann::ordered_json;

// Where a construct starts in the template, 1-based; columns count bytes.
struct Pos {
  int line = 1, column = 1;
};

enum class ExprKind {
  literal,  // value
  name,     // name
  list,     // args: the elements (a tuple reads as a list)
  dict,     // args: key, value, key, value, ...
  attr,     // args[0].name
  item,     // args[0][args[1]]
  slice,    // args[0][args[1]:args[2]:args[3]], each bound may be null
  call,     // args[0](args[1..], kwargs)
  filter,   // args[0] | name(args[1..], kwargs)
  test,     // args[0] is [not] name(args[1..])
  unary,    // name ("not", "-", "+") args[0]
  binary,   // args[0] name args[1]
  compare,  // args[0] ops[0] args[1] ops[1] args[2] ...: chained as in Python (a < b <= c)
  cond,     // args[0] if args[1] else args[2] (args[2] may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  Pos pos;
  Json value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // test: "is not"
  std::vector<std::string> ops;  // compare
};

enum class NodeKind {
  text,       // text
  output,     // {{ expr }}
  if_chain,   // branches: (condition, body), the else branch's condition null
  for_loop,   // for targets in expr [if filter]: body [else: else_body]
  set,        // set targets[0] (or targets[0].attribute) = expr
  set_block,  // set targets[0]: body rendered to a string
  loop_break,
  loop_continue,
};

struct Node;
using Body = std::vector<Node>;

struct Node {
  NodeKind kind;
  Pos pos;
  std::string text;
  ExprPtr expr, filter;
  std::vector<std::string> targets;
  std::string attribute;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
};

// Parses a template; throws io::ConfigError "<origin> line L column C: what" on anything
// outside the supported subset or malformed.
Body parse_template(const std::string& source, const std::string& origin);

// Limits that keep a hostile template from exhausting the stack or memory.
inline constexpr int kMaxNesting = 128;                   // nested blocks or sub-expressions
inline constexpr size_t kMaxOutputBytes = size_t(64) << 20;  // one rendering, and any string value
inline constexpr int64_t kMaxWork = 5'000'000;               // values built by one rendering (node_count)
inline constexpr int64_t kMaxLoopIterations = 100'000;      // all loops of one rendering together

}  // namespace trireme::io::jinja
