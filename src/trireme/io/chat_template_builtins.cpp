// Filters, tests and methods of chat templates (see chat_template_builtins.h).
#include "trireme/io/chat_template_builtins.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <iterator>

#include "trireme/core/error.h"

namespace trireme::io::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Python's str.strip family: whitespace, or the characters of `chars` when given.
std::string strip(const std::string& s, bool left, bool right, const Value* chars) {
  const std::string* set = chars && !chars->is_undefined() && !chars->json().is_null()
                               ? &to_string_ref(*chars, "the characters to strip")
                               : nullptr;
  auto drop = [&](char c) { return set ? set->find(c) != std::string::npos : is_space(c); };
  size_t b = 0, e = s.size();
  while (left && b < e && drop(s[b])) ++b;
  while (right && e > b && drop(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// Case mapping of ASCII letters; other characters (CJK has no case) stay as they are.
std::string map_case(std::string s, int (*f)(int)) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x80) c = char(f(static_cast<unsigned char>(c)));
  return s;
}
std::string capitalize(std::string s) {
  s = map_case(std::move(s), [](int c) { return std::tolower(c); });
  if (!s.empty() && static_cast<unsigned char>(s[0]) < 0x80) s[0] = char(std::toupper(static_cast<unsigned char>(s[0])));
  return s;
}
std::string title(std::string s) {
  bool start = true;
  for (char& c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && std::isalpha(u)) {
      c = char(start ? std::toupper(u) : std::tolower(u));
      start = false;
    } else {
      start = !(u >= 0x80 || std::isdigit(u));
    }
  }
  return s;
}

Json split(const std::string& s, const Value* sep, int64_t maxsplit) {
  Json out = Json::array();
  if (!sep || sep->is_undefined() || sep->json().is_null()) {  // runs of whitespace, no empty parts
    size_t i = 0;
    while (true) {
      while (i < s.size() && is_space(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        size_t e = s.size();
        while (e > i && is_space(s[e - 1])) --e;
        out.push_back(s.substr(i, e - i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !is_space(s[j])) ++j;
      out.push_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  const std::string& d = to_string_ref(*sep, "the separator");
  if (d.empty()) throw EvalError("split: empty separator");
  size_t i = 0;
  for (size_t at; (maxsplit < 0 || int64_t(out.size()) < maxsplit) && (at = s.find(d, i)) != std::string::npos;
       i = at + d.size())
    out.push_back(s.substr(i, at - i));
  out.push_back(s.substr(i));
  return out;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) throw EvalError("replace: the text to replace is empty");
  std::string out;
  size_t i = 0;
  for (size_t at; count != 0 && (at = s.find(from, i)) != std::string::npos; i = at + from.size(), --count)
    out.append(s, i, at - i).append(to);
  return out.append(s, i);
}

bool has_affix(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Json& a) {
    if (!a.is_string()) throw EvalError("startswith/endswith: expected a string or a list of strings");
    const auto& t = a.get_ref<const std::string&>();
    return t.size() <= s.size() && (prefix ? s.compare(0, t.size(), t) : s.compare(s.size() - t.size(), t.size(), t)) == 0;
  };
  if (affix.json().is_array()) return std::any_of(affix.json().begin(), affix.json().end(), one);
  return one(affix.json());
}

// The items of a list, the keys of a mapping, the characters of a string.
Json items_of(const Value& v, const char* what) {
  if (v.is_undefined()) return Json::array();
  const Json& j = v.json();
  if (j.is_array()) return j;
  if (j.is_object()) {
    Json keys = Json::array();
    for (const auto& [k, x] : j.items()) keys.push_back(k);
    return keys;
  }
  if (j.is_string()) {
    Json chars = Json::array();
    const auto& s = j.get_ref<const std::string&>();
    for (int64_t i = 0, n = length(v); i < n; ++i) chars.push_back(utf8_slice(s, i, i + 1, 1));
    return chars;
  }
  throw EvalError(str_cat(what, ": expected a list, got ", type_name(v)));
}

Value attribute_of(const Json& item, const std::string& attr) {
  if (item.is_object() && item.contains(attr)) return Value::of(item[attr]);
  return Value::undefined(attr);
}

// selectattr / rejectattr: the items whose attribute passes the test (truth when none is named).
Value select_by_attribute(const Value& subject, const Args& args, bool keep) {
  const Value* attr = args.get(0, "attribute");
  if (!attr) throw EvalError("selectattr: expected an attribute name");
  const std::string& name = to_string_ref(*attr, "the attribute name");
  Args test_args;
  for (size_t i = 2; i < args.positional.size(); ++i) test_args.positional.push_back(args.positional[i]);
  Json out = Json::array();
  for (const Json& item : items_of(subject, "selectattr")) {
    const Value a = attribute_of(item, name);
    const bool pass = args.positional.size() > 1 ? apply_test(to_string_ref(args.positional[1], "the test name"), a, test_args)
                                                 : truthy(a);
    if (pass == keep) out.push_back(item);
  }
  return Value::of(std::move(out));
}

const char* const kFilters[] = {"default", "d", "trim", "upper", "lower", "capitalize", "title", "string", "safe",
                                "length", "count", "tojson", "first", "last", "list", "reverse", "join", "int",
                                "replace", "items", "selectattr", "rejectattr", "map", "abs"};
const char* const kTests[] = {"defined", "undefined", "none", "string", "number", "integer", "float", "boolean",
                              "true", "false", "mapping", "sequence", "iterable", "even", "odd", "divisibleby",
                              "eq", "equalto", "==", "ne", "!=", "in", "lower", "upper"};

std::string listing(const char* const* names, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += (i ? ", " : "") + std::string(names[i]);
  return out;
}

}  // namespace

bool is_known_filter(const std::string& name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}
bool is_known_test(const std::string& name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

std::string unknown_filter_message(const std::string& name) {
  return str_cat("the filter '", name, "' is not supported by trireme's chat templates (supported: ",
                 listing(kFilters, std::size(kFilters)), ")");
}
std::string unknown_test_message(const std::string& name) {
  return str_cat("the test '", name, "' is not supported by trireme's chat templates (supported: ",
                 listing(kTests, std::size(kTests)), ")");
}

const Value* Args::get(size_t i, const char* name) const {
  if (i < positional.size()) return &positional[i];
  for (const auto& [k, v] : named)
    if (k == name) return &v;
  return nullptr;
}

int64_t to_integer(const Value& v, const char* what) {
  const Json& j = v.json();
  if (v.kind != Value::Kind::data || !(j.is_number_integer() || j.is_boolean()))
    throw EvalError(str_cat(what, ": expected an integer, got ", type_name(v)));
  return j.is_boolean() ? int64_t(j.get<bool>()) : j.get<int64_t>();
}

const std::string& to_string_ref(const Value& v, const char* what) {
  if (v.kind != Value::Kind::data || !v.json().is_string())
    throw EvalError(str_cat(what, ": expected a string, got ", type_name(v)));
  return v.json().get_ref<const std::string&>();
}

Value apply_filter(const std::string& name, const Value& subject, const Args& args) {
  auto text = [&] { return to_str(subject); };
  if (name == "default" || name == "d") {
    const Value* def = args.get(0, "default_value");
    const Value* boolean = args.get(1, "boolean");
    const bool replace_falsy = boolean && truthy(*boolean);
    if (subject.is_undefined() || (replace_falsy && !truthy(subject))) return def ? *def : Value::of("");
    return subject;
  }
  if (name == "trim") return Value::of(strip(text(), true, true, args.get(0, "chars")));
  if (name == "upper") return Value::of(map_case(text(), [](int c) { return std::toupper(c); }));
  if (name == "lower") return Value::of(map_case(text(), [](int c) { return std::tolower(c); }));
  if (name == "capitalize") return Value::of(capitalize(text()));
  if (name == "title") return Value::of(title(text()));
  if (name == "string") return Value::of(text());
  if (name == "safe") return subject;
  if (name == "length" || name == "count") {
    const int64_t n = length(subject);
    if (n < 0) throw EvalError(str_cat("length: a ", type_name(subject), " has no length"));
    return Value::of(n);
  }
  if (name == "tojson") {
    if (subject.is_undefined()) throw EvalError(str_cat("tojson: '", subject.what, "' is undefined"));
    // transformers' signature: tojson(ensure_ascii=False, indent=None, separators=None, sort_keys=False).
    const Value* ascii = args.get(0, "ensure_ascii");
    const Value* separators = args.get(2, "separators");
    if ((ascii && truthy(*ascii)) || (separators && !separators->json().is_null()))
      throw EvalError("tojson: ensure_ascii and separators are not supported (indent and sort_keys are)");
    const Value* indent = args.get(1, "indent");
    const Value* sort = args.get(3, "sort_keys");
    const bool has_indent = indent && !indent->json().is_null();
    return Value::of(to_json_text(subject.json(), has_indent ? int(to_integer(*indent, "tojson indent")) : -1,
                                  sort && truthy(*sort)));
  }
  if (name == "first" || name == "last") {
    const Json items = items_of(subject, name.c_str());
    if (items.empty()) return Value::undefined(name + " of an empty sequence");
    return Value::of(name == "first" ? items.front() : items.back());
  }
  if (name == "list") return Value::of(items_of(subject, "list"));
  if (name == "reverse") {
    if (subject.json().is_string()) return Value::of(utf8_slice(subject.json().get_ref<const std::string&>(), {}, {}, -1));
    Json items = items_of(subject, "reverse");
    std::reverse(items.begin(), items.end());
    return Value::of(std::move(items));
  }
  if (name == "join") {
    const Value* sep = args.get(0, "d");
    const Value* attr = args.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const Json& item : items_of(subject, "join")) {
      out += first ? "" : sep ? to_str(*sep) : "";
      out += to_str(attr ? attribute_of(item, to_string_ref(*attr, "the attribute name")) : Value::of(item));
      first = false;
    }
    return Value::of(std::move(out));
  }
  if (name == "int") {
    const Json& j = subject.json();
    if (j.is_number_integer()) return subject;
    if (j.is_number_float()) {
      const double d = j.get<double>();
      if (!(d > -9.2e18 && d < 9.2e18)) throw EvalError("int: the number is out of the integer range");
      return Value::of(int64_t(d));
    }
    if (j.is_boolean()) return Value::of(int64_t(j.get<bool>()));
    try {
      return Value::of(int64_t(std::stoll(strip(text(), true, true, nullptr))));
    } catch (const std::exception&) {
      return Value::of(int64_t(0));  // Jinja's int filter falls back to its default, 0
    }
  }
  if (name == "replace") {
    const Value* from = args.get(0, "old");
    const Value* to = args.get(1, "new");
    const Value* count = args.get(2, "count");
    if (!from || !to) throw EvalError("replace: expected the old and the new text");
    return Value::of(replace(text(), to_str(*from), to_str(*to), count ? to_integer(*count, "replace count") : -1));
  }
  if (name == "items") return call_method(subject, "items", {});
  if (name == "abs") {
    const Json& j = subject.json();
    if (j.is_number_integer() && j.get<int64_t>() != INT64_MIN) return Value::of(std::abs(j.get<int64_t>()));
    if (j.is_number_float()) return Value::of(std::fabs(j.get<double>()));
    throw EvalError(str_cat("abs: expected a number, got ", type_name(subject)));
  }
  if (name == "selectattr" || name == "rejectattr") return select_by_attribute(subject, args, name == "selectattr");
  if (name == "map") {
    const Value* attr = args.get(99, "attribute");
    if (!attr) throw EvalError("map: only map(attribute='name') is supported");
    Json out = Json::array();
    const Value* def = args.get(99, "default");
    for (const Json& item : items_of(subject, "map")) {
      const Value a = attribute_of(item, to_string_ref(*attr, "the attribute name"));
      out.push_back(a.is_undefined() ? (def ? def->json() : Json()) : a.json());
    }
    return Value::of(std::move(out));
  }
  throw EvalError(unknown_filter_message(name));
}

bool apply_test(const std::string& name, const Value& v, const Args& args) {
  const Json& j = v.json();
  const bool data = v.kind == Value::Kind::data;
  auto arg = [&]() -> const Value& {
    if (args.positional.empty()) throw EvalError(str_cat("the test '", name, "' needs an argument"));
    return args.positional[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return data && j.is_null();
  if (name == "string") return data && j.is_string();
  if (name == "number") return data && j.is_number();
  if (name == "integer") return data && j.is_number_integer();
  if (name == "float") return data && j.is_number_float();
  if (name == "boolean") return data && j.is_boolean();
  if (name == "true") return data && j.is_boolean() && j.get<bool>();
  if (name == "false") return data && j.is_boolean() && !j.get<bool>();
  if (name == "mapping") return v.kind == Value::Kind::ns || (data && j.is_object());
  if (name == "sequence") return data && (j.is_array() || j.is_string() || j.is_object());
  if (name == "iterable") return data && (j.is_array() || j.is_string() || j.is_object());
  if (name == "even" || name == "odd") return to_integer(v, name.c_str()) % 2 == (name == "odd" ? 1 : 0);
  if (name == "divisibleby") {
    const int64_t d = to_integer(arg(), "divisibleby");
    if (d == 0) throw EvalError("divisibleby 0");
    return to_integer(v, "divisibleby") % d == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, arg());
  if (name == "ne" || name == "!=") return !equal(v, arg());
  if (name == "in") return apply_test("contained", arg(), Args{{v}, {}});
  if (name == "contained") {  // internal: `subject` contains the argument (the `in` operator)
    const Value& x = arg();
    if (j.is_string())
      return j.get_ref<const std::string&>().find(to_string_ref(x, "'in' on a string")) != std::string::npos;
    if (j.is_array())
      return std::any_of(j.begin(), j.end(), [&](const Json& e) { return equal(Value::of(e), x); });
    if (j.is_object()) return x.json().is_string() && j.contains(x.json().get<std::string>());
    if (v.is_undefined()) return false;
    throw EvalError(str_cat("'in': a ", type_name(v), " is not a container"));
  }
  if (name == "lower" || name == "upper") {
    if (!data || !j.is_string()) return false;
    const std::string& s = j.get_ref<const std::string&>();
    return std::none_of(s.begin(), s.end(), [&](char c) { return name == "lower" ? std::isupper(static_cast<unsigned char>(c)) : std::islower(static_cast<unsigned char>(c)); });
  }
  throw EvalError(unknown_test_message(name));
}

Value call_method(const Value& object, const std::string& name, const Args& args) {
  if (object.is_undefined()) throw EvalError(str_cat("'", object.what, "' is undefined"));
  const Json& j = object.json();
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return Value::of(strip(s, name != "rstrip", name != "lstrip", args.get(0, "chars")));
    if (name == "split") {
      const Value* maxsplit = args.get(1, "maxsplit");
      return Value::of(split(s, args.get(0, "sep"), maxsplit ? to_integer(*maxsplit, "split maxsplit") : -1));
    }
    if (name == "startswith" || name == "endswith") {
      const Value* a = args.get(0, "prefix");
      if (!a) throw EvalError(str_cat(name, ": expected an argument"));
      return Value::of(has_affix(s, *a, name == "startswith"));
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") return apply_filter(name, object, {});
    if (name == "replace") return apply_filter(name, object, args);
    if (name == "find") {
      const Value* a = args.get(0, "sub");
      if (!a) throw EvalError("find: expected an argument");
      const size_t at = s.find(to_string_ref(*a, "find"));
      return Value::of(at == std::string::npos ? int64_t(-1) : length(Value::of(s.substr(0, at))));
    }
    if (name == "join") {
      const Value* a = args.get(0, "iterable");
      if (!a) throw EvalError("join: expected an argument");
      return apply_filter("join", *a, Args{{object}, {}});
    }
  } else if (j.is_object()) {
    if (name == "items" || name == "keys" || name == "values") {
      Json out = Json::array();
      for (const auto& [k, v] : j.items())
        out.push_back(name == "items" ? Json::array({k, v}) : name == "keys" ? Json(k) : v);
      return Value::of(std::move(out));
    }
    if (name == "get") {
      const Value* key = args.get(0, "key");
      if (!key) throw EvalError("get: expected a key");
      const std::string& k = to_string_ref(*key, "get");
      if (j.contains(k)) return Value::of(j[k]);
      const Value* def = args.get(1, "default");
      return def ? *def : Value::of(nullptr);
    }
  }
  throw EvalError(str_cat("the method '", name, "' of a ", type_name(object),
                          " is not supported by trireme's chat templates (strings: strip, lstrip, rstrip, split, "
                          "startswith, endswith, upper, lower, title, capitalize, replace, find, join; mappings: "
                          "items, keys, values, get)"));
}

}  // namespace trireme::io::jinja
