// The values a chat template computes with (io/chat_template.h) and Python's meaning of them,
// which Jinja inherits: truth, str(), repr(), ==, <, len(), indexing and slicing of strings by
// code point, and transformers' tojson (json.dumps with ensure_ascii=False). Internal to the
// chat template renderer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "trireme/io/chat_template_syntax.h"

namespace trireme::io::jinja {

// A JSON value, Jinja's Undefined (an unknown name or a missing key: falsy, renders empty), or a
// namespace() object, whose attributes `{% set ns.x = ... %}` changes in place.
// JSON values are immutable and shared: passing one around, or taking an element of it
// (Value::element), copies nothing.
struct Value {
  enum class Kind { undefined, data, ns };
  Kind kind = Kind::undefined;
  std::shared_ptr<const Json> data;
  std::shared_ptr<Json> ns;
  std::string what;  // an undefined value: the name or key it stands for, for error messages

  static Value undefined(std::string what) { return {Kind::undefined, nullptr, nullptr, std::move(what)}; }
  static Value of(Json j) { return {Kind::data, std::make_shared<const Json>(std::move(j)), nullptr, {}}; }
  // A part of this value's JSON (which must be data) that shares its storage.
  Value element(const Json& part) const { return {Kind::data, std::shared_ptr<const Json>(data, &part), nullptr, {}}; }
  bool is_undefined() const { return kind == Kind::undefined; }
  // The value as JSON (a namespace as its object; undefined as null).
  const Json& json() const;
};

// A refusal while evaluating (wrong type, unknown name, too deep); the renderer adds the
// template position.
struct EvalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// How deep values may nest where they are printed, compared or built: deeper data from a file
// or built by a template is refused rather than recursed into.
inline constexpr int kMaxValueDepth = 256;

// The nodes of `j` (every value, key and 64 bytes of string counts one): the work of building
// it. Throws EvalError past kMaxValueDepth.
int64_t node_count(const Json& j);

bool truthy(const Value& v);
std::string to_str(const Value& v);   // Python's str(): None, True, ['a', 1], {'k': 'v'}
std::string repr(const Json& j);      // Python's repr()
std::string type_name(const Value& v);

// Python's json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=sort_keys); indent < 0:
// none, with ", " and ": " separators.
std::string to_json_text(const Json& j, int indent, bool sort_keys);

bool equal(const Value& a, const Value& b);
// a < b for two numbers or two strings; nullopt for other pairs.
std::optional<bool> less(const Value& a, const Value& b);

// Strings by code point, as Python's str.
int64_t length(const Value& v);  // strings, lists, objects; undefined 0; others -1
std::string utf8_slice(const std::string& s, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step);
Json list_slice(const Json& list, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step);

}  // namespace trireme::io::jinja
