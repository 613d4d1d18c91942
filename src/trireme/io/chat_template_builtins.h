// The filters (x | trim), tests (x is defined) and methods (s.strip(), d.items()) that chat
// templates use, with Python's and Jinja's meaning. Internal to the chat template renderer.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "trireme/io/chat_template_values.h"

namespace trireme::io::jinja {

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;

  // The i-th positional argument, or the named one, or nullptr.
  const Value* get(size_t i, const char* name) const;
};

// Whether a filter or test of that name exists, so a template naming another is refused when
// it is parsed (as Jinja does), not only when the line that uses it runs.
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);
// The refusal of an unknown one, listing the supported ones.
std::string unknown_filter_message(const std::string& name);
std::string unknown_test_message(const std::string& name);

Value apply_filter(const std::string& name, const Value& subject, const Args& args);
bool apply_test(const std::string& name, const Value& subject, const Args& args);
Value call_method(const Value& object, const std::string& name, const Args& args);

// Argument helpers the renderer shares.
int64_t to_integer(const Value& v, const char* what);
const std::string& to_string_ref(const Value& v, const char* what);

}  // namespace trireme::io::jinja
