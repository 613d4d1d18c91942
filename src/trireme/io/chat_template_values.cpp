// Python's meaning of the values of a chat template (see chat_template_values.h).
#include "trireme/io/chat_template_values.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "trireme/core/error.h"
#include "trireme/io/utf8.h"

namespace trireme::io::jinja {

namespace {

// nlohmann prints a float the shortest way that reads back ("1.0", "2.5", "1e+20"), as Python does.
std::string float_text(double d) { return Json(d).dump(); }

void append_hex_escape(std::string& out, const char* format, unsigned value) {
  char buf[12];
  std::snprintf(buf, sizeof buf, format, value);
  out += buf;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) append_hex_escape(out, "\\u%04x", static_cast<unsigned char>(c));
        else out += c;
    }
  }
  out += '"';
}

void check_depth(int level) {
  if (level > kMaxValueDepth) throw EvalError(str_cat("a value nested more than ", kMaxValueDepth, " deep"));
}

void json_text(std::string& out, const Json& j, int indent, bool sort_keys, int level) {
  check_depth(level);
  const bool pretty = indent >= 0;
  auto newline = [&](int lvl) {
    if (pretty) out += '\n' + std::string(size_t(indent) * size_t(lvl), ' ');
  };
  const char* item_sep = pretty ? "," : ", ";
  switch (j.type()) {
    case Json::value_t::null: out += "null"; return;
    case Json::value_t::boolean: out += j.get<bool>() ? "true" : "false"; return;
    case Json::value_t::number_float: out += float_text(j.get<double>()); return;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: out += j.dump(); return;
    case Json::value_t::string: json_string(out, j.get_ref<const std::string&>()); return;
    case Json::value_t::array: {
      if (j.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < j.size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        json_text(out, j[i], indent, sort_keys, level + 1);
      }
      newline(level);
      out += ']';
      return;
    }
    case Json::value_t::object: {
      if (j.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::string*> keys;
      for (const auto& [k, v] : j.items()) keys.push_back(&k);
      if (sort_keys) std::sort(keys.begin(), keys.end(), [](auto* a, auto* b) { return *a < *b; });
      out += '{';
      for (size_t i = 0; i < keys.size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        json_string(out, *keys[i]);
        out += ": ";
        json_text(out, j.at(*keys[i]), indent, sort_keys, level + 1);
      }
      newline(level);
      out += '}';
      return;
    }
    default: out += "null";
  }
}

// The code point boundaries of s: offsets[i] is where code point i starts; offsets.back() == size.
std::vector<size_t> code_point_offsets(const std::string& s) {
  std::vector<size_t> offsets;
  for (size_t i = 0; i < s.size(); i += utf8_next(s, i).length) offsets.push_back(i);
  offsets.push_back(s.size());
  return offsets;
}

// The indices Python's slice [start:stop:step] picks out of n items.
std::vector<int64_t> slice_indices(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
  auto clamp = [&](std::optional<int64_t> v, int64_t def, int64_t lo, int64_t hi) {
    if (!v) return def;
    int64_t x = *v < 0 ? *v + n : *v;
    return std::clamp(x, lo, hi);
  };
  std::vector<int64_t> out;
  // A step past the end ends the slice (checked: a huge step must not overflow).
  if (step > 0) {
    for (int64_t i = clamp(start, 0, 0, n), e = clamp(stop, n, 0, n); i < e;) {
      out.push_back(i);
      if (__builtin_add_overflow(i, step, &i)) break;
    }
  } else {
    for (int64_t i = clamp(start, n - 1, -1, n - 1), e = clamp(stop, -1, -1, n - 1); i > e;) {
      out.push_back(i);
      if (__builtin_add_overflow(i, step, &i)) break;
    }
  }
  return out;
}

}  // namespace

bool truthy(const Value& v) {
  if (v.kind == Value::Kind::undefined) return false;
  if (v.kind == Value::Kind::ns) return true;
  const Json& j = v.json();
  switch (j.type()) {
    case Json::value_t::null: return false;
    case Json::value_t::boolean: return j.get<bool>();
    case Json::value_t::number_integer: return j.get<int64_t>() != 0;
    case Json::value_t::number_unsigned: return j.get<uint64_t>() != 0;
    case Json::value_t::number_float: return j.get<double>() != 0;
    case Json::value_t::string: return !j.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object: return !j.empty();
    default: return false;
  }
}

namespace {

std::string repr_at(const Json& j, int level) {
  check_depth(level);
  switch (j.type()) {
    case Json::value_t::null: return "None";
    case Json::value_t::boolean: return j.get<bool>() ? "True" : "False";
    case Json::value_t::number_float: return float_text(j.get<double>());
    case Json::value_t::string: {
      const auto& s = j.get_ref<const std::string&>();
      const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
      std::string out(1, q);
      for (const char c : s) {
        if (c == q || c == '\\') out += '\\', out += c;
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
          append_hex_escape(out, "\\x%02x", static_cast<unsigned char>(c));
        else out += c;
      }
      return out + q;
    }
    case Json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + repr_at(j[i], level + 1);
      return out + "]";
    }
    case Json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : j.items()) {
        out += (first ? "" : ", ") + repr_at(Json(k), level + 1) + ": " + repr_at(v, level + 1);
        first = false;
      }
      return out + "}";
    }
    default: return j.dump();
  }
}

// Python's ==: True == 1, 1 == 1.0, dicts equal whatever their key order.
bool json_equal(const Json& x, const Json& y, int level) {
  check_depth(level);
  if (x.is_boolean() && y.is_number()) return Json(int64_t(x.get<bool>())) == y;
  if (y.is_boolean() && x.is_number()) return Json(int64_t(y.get<bool>())) == x;
  if (x.is_array() && y.is_array()) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!json_equal(x[i], y[i], level + 1)) return false;
    return true;
  }
  if (x.is_object() && y.is_object()) {
    if (x.size() != y.size()) return false;
    for (const auto& [k, v] : x.items()) {
      auto it = y.find(k);
      if (it == y.end() || !json_equal(v, *it, level + 1)) return false;
    }
    return true;
  }
  if (x.is_structured() || y.is_structured()) return false;
  return x == y;  // scalars; nlohmann compares numbers by value
}

int64_t count_nodes(const Json& j, int level) {
  check_depth(level);
  int64_t n = 1;
  if (j.is_string()) return n + int64_t(j.get_ref<const std::string&>().size() / 64);
  if (j.is_array())
    for (const Json& e : j) n += count_nodes(e, level + 1);
  if (j.is_object())
    for (const auto& [k, v] : j.items()) n += 1 + int64_t(k.size() / 64) + count_nodes(v, level + 1);
  return n;
}

}  // namespace

std::string repr(const Json& j) { return repr_at(j, 0); }

int64_t node_count(const Json& j) { return count_nodes(j, 0); }

const Json& Value::json() const {
  static const Json null;
  if (kind == Kind::ns) return *ns;
  return data ? *data : null;
}

std::string to_str(const Value& v) {
  if (v.kind == Value::Kind::undefined) return "";
  if (v.kind == Value::Kind::ns) return "<Namespace " + repr(*v.ns) + ">";
  if (v.json().is_string()) return v.json().get<std::string>();
  return repr(v.json());
}

std::string type_name(const Value& v) {
  if (v.kind == Value::Kind::undefined) return "undefined";
  if (v.kind == Value::Kind::ns) return "namespace";
  switch (v.json().type()) {
    case Json::value_t::null: return "none";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::string: return "string";
    case Json::value_t::array: return "list";
    case Json::value_t::object: return "mapping";
    case Json::value_t::number_float: return "float";
    default: return "integer";
  }
}

std::string to_json_text(const Json& j, int indent, bool sort_keys) {
  std::string out;
  json_text(out, j, indent, sort_keys, 0);
  return out;
}

bool equal(const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.kind == Value::Kind::ns || b.kind == Value::Kind::ns) return a.ns == b.ns;
  return json_equal(a.json(), b.json(), 0);
}

std::optional<bool> less(const Value& a, const Value& b) {
  if (a.kind != Value::Kind::data || b.kind != Value::Kind::data) return std::nullopt;
  const Json& x = a.json();
  const Json& y = b.json();
  if (x.is_number() && y.is_number()) return x.get<double>() < y.get<double>();
  // UTF-8 byte order is code point order, as Python compares strings.
  if (x.is_string() && y.is_string()) return x.get_ref<const std::string&>() < y.get_ref<const std::string&>();
  return std::nullopt;
}

int64_t length(const Value& v) {
  if (v.is_undefined()) return 0;
  const Json& j = v.json();
  if (j.is_string()) return int64_t(code_point_offsets(j.get_ref<const std::string&>()).size()) - 1;
  if (j.is_array() || j.is_object()) return int64_t(j.size());
  return -1;
}

std::string utf8_slice(const std::string& s, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
  const std::vector<size_t> at = code_point_offsets(s);
  std::string out;
  for (int64_t i : slice_indices(int64_t(at.size()) - 1, start, stop, step)) out.append(s, at[size_t(i)], at[size_t(i) + 1] - at[size_t(i)]);
  return out;
}

Json list_slice(const Json& list, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
  Json out = Json::array();
  for (int64_t i : slice_indices(int64_t(list.size()), start, stop, step)) out.push_back(list[size_t(i)]);
  return out;
}

}  // namespace trireme::io::jinja
