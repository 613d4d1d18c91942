// The values a chat template computes with (io/chat_template.h) and Python's meaning of them,
// which Jinja inherits: truth, str(), repr(), ==, <, len(), indexing and slicing of strings by
// code point, and transformers' tojson (json.dumps with ensure_ascii=False). Internal to the
// chat template renderer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "trireme/io/chat_template_syntax.h"

namespace trireme::io::jinja {

// A JSON value, Jinja's Undefined (an unknown name or a missing key: falsy, renders empty), or a
// namespace() object, whose attributes `{% set ns.x = ... %}` changes in place.
struct Value {
  enum class Kind { undefined, data, ns };
  Kind kind = Kind::undefined;
  Json data;
  std::shared_ptr<Json> ns;
  std::string what;  // an undefined value: the name or key it stands for, for error messages

  static Value undefined(std::string what) { return {Kind::undefined, Json(), nullptr, std::move(what)}; }
  static Value of(Json j) { return {Kind::data, std::move(j), nullptr, {}}; }
  bool is_undefined() const { return kind == Kind::undefined; }
  // The value as JSON (a namespace as its object; undefined as null).
  const Json& json() const { return kind == Kind::ns ? *ns : data; }
};

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
