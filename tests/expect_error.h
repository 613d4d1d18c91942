// Shared by the test binaries: an action must fail with a trireme::Error that says what was wrong.
//
//   expect_error([&] { cross_entropy(logits, bad_targets); }, "cross_entropy: target 9");
//   expect_error([&] { launch(o); }, {"already in use", "--master-port"});
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "trireme/core/error.h"

namespace trireme::testing {

// fn() throws a trireme::Error whose message contains every one of `parts`.
template <class Fn>
void expect_error_parts(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one containing: " << (parts.empty() ? "" : parts.front());
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

template <class Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> parts) {
  expect_error_parts(std::forward<Fn>(fn), std::vector<std::string>(parts));
}

template <class Fn>
void expect_error(Fn&& fn, const std::string& part) {
  expect_error_parts(std::forward<Fn>(fn), {part});
}

// The message of the trireme::Error fn() throws (a test failure and "" when it throws none), for
// tests that check its parts one by one.
template <class Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

}  // namespace trireme::testing
