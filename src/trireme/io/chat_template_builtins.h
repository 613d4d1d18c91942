// The filters (x | trim), tests (x is defined) and methods (s.strip(), d.items()) that chat
// templates use, with Python's and Jinja's meaning. Internal to the chat template renderer.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "trireme/io/chat_template_values.h"

namespace trireme::io::jinja {

// A builtin's refusal (wrong type, unknown name); the renderer adds the template position.
struct EvalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;

  // The i-th positional argument, or the named one, or nullptr.
  const Value* get(size_t i, const char* name) const;
};

Value apply_filter(const std::string& name, const Value& subject, const Args& args);
bool apply_test(const std::string& name, const Value& subject, const Args& args);
Value call_method(const Value& object, const std::string& name, const Args& args);

// Argument helpers the renderer shares.
int64_t to_integer(const Value& v, const char* what);
const std::string& to_string_ref(const Value& v, const char* what);

}  // namespace trireme::io::jinja
