// Chat templates (io/chat_template.h): real models' templates render byte for byte as Python's
// jinja2 renders them in transformers' configuration (the fixture
// tests/fixtures/chat_templates/cases.json, written by scripts/make_chat_template_fixtures.py),
// raise_exception surfaces the template's message, and what the subset does not hold is refused
// naming the construct and its line and column.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "trireme/io/chat_template.h"
#include "trireme/io/config.h"

using namespace trireme;
using Json = nlohmann::ordered_json;

namespace {

Json fixture() {
  std::ifstream in(std::string(TRIREME_SOURCE_DIR) + "/tests/fixtures/chat_templates/cases.json");
  std::stringstream s;
  s << in.rdbuf();
  return Json::parse(s.str());
}

std::string render(const std::string& source, const Json& context = Json::object()) {
  return io::ChatTemplate(source, "t").render(context);
}

// The message of the io::ConfigError that rendering `source` throws ("" when none).
std::string error_of(const std::string& source, const Json& context = Json::object()) {
  try {
    render(source, context);
  } catch (const io::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ChatTemplate, RealTemplatesRenderAsJinja2Does) {
  const Json f = fixture();
  ASSERT_GE(f["cases"].size(), 60u);
  int compared = 0, raised = 0;
  for (const Json& c : f["cases"]) {
    const std::string name = c["template"].get<std::string>() + " / " + c["conversation"].get<std::string>() +
                             (c["add_generation_prompt"].get<bool>() ? " + generation prompt" : "");
    const io::ChatTemplate t(f["templates"][c["template"].get<std::string>()].get<std::string>(), name);
    Json context = c["variables"];
    context["messages"] = f["conversations"][c["conversation"].get<std::string>()];
    context["add_generation_prompt"] = c["add_generation_prompt"];
    if (c.contains("expected")) {
      EXPECT_EQ(t.render(context), c["expected"].get<std::string>()) << name;
      ++compared;
    } else {
      try {
        t.render(context);
        ADD_FAILURE() << name << ": expected the template to raise \"" << c["error"].get<std::string>() << "\"";
      } catch (const io::ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("the template raised an error: " + c["error"].get<std::string>()),
                  std::string::npos)
            << e.what();
      }
      ++raised;
    }
  }
  EXPECT_GE(compared, 60);
  EXPECT_EQ(raised, 4);  // Llama-2 and Mistral on two user turns in a row
}

TEST(ChatTemplate, CornersOfTheSubsetRenderAsJinja2Does) {
  const Json f = fixture();
  ASSERT_GE(f["snippets"].size(), 40u);
  for (const Json& s : f["snippets"]) {
    const std::string source = s["template"].get<std::string>();
    EXPECT_EQ(render(source, {{"messages", f["snippet_messages"]}}), s["expected"].get<std::string>()) << source;
  }
}

TEST(ChatTemplate, RenderConversationGivesTheVariablesTransformersGives) {
  const io::ChatTemplate t("{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}{{ eos_token }}{% endfor %}"
                           "{% if add_generation_prompt %}A:{% endif %}",
                           "t");
  const Json messages = Json::parse(R"([{"role": "user", "content": "你好"}])");
  EXPECT_EQ(t.render_conversation(messages, true, "<s>", "</s>"), "<s>user:你好</s>A:");
  EXPECT_EQ(t.render_conversation(messages, false, "", ""), "user:你好");
}

TEST(ChatTemplate, WhitespaceControlAndUndefinedNames) {
  EXPECT_EQ(render("a  {{- ' b ' -}}  c"), "a b c");
  EXPECT_EQ(render("x\n    {% if true %}\n  y\n    {% endif %}\nz\n"), "x\n  y\nz");
  EXPECT_EQ(render("{# gone #}\n{#- also -#}  k"), "k");
  EXPECT_EQ(render("[{{ nothing }}]{% if nothing %}no{% else %}falsy{% endif %}{{ nothing is defined }}"),
            "[]falsyFalse");
  EXPECT_EQ(render("{{ d.missing is defined }}{{ xs[5] is defined }}", {{"d", Json::object()}, {"xs", {1}}}),
            "FalseFalse");
  EXPECT_EQ(render("{{ nothing | default('d') }}{{ '' | default('e', true) }}{{ nothing | length }}"), "de0");
  EXPECT_EQ(render("{{ '床前明月光' | length }} {{ '床前明月光'[1:3] }} {{ '床前明月光'[-1] }}"), "5 前明 光");
}

TEST(ChatTemplate, RaiseExceptionSurfacesTheTemplatesMessageAndPosition) {
  const std::string e = error_of("ok\n  {{ raise_exception('roles must alternate') }}");
  EXPECT_NE(e.find("t line 2 column 6: the template raised an error: roles must alternate"), std::string::npos) << e;
}

TEST(ChatTemplate, UnsupportedConstructsAreNamedWithLineAndColumn) {
  struct Case {
    const char* source;
    const char* expected;
  };
  const Case cases[] = {
      {"a\n{% macro m() %}x{% endmacro %}", "t line 2 column 1: the tag '{% macro %}' is not supported"},
      {"{% include 'x' %}", "line 1 column 1: the tag '{% include %}' is not supported"},
      {"{{ 'x' | wordwrap }}", "line 1 column 10: the filter 'wordwrap' is not supported"},
      {"{{ x is callable }}", "line 1 column 9: the test 'callable' is not supported"},
      // Refused when parsed, though the line would never run.
      {"{% if false %}\n  {{ x | wordwrap }}{% endif %}", "line 2 column 10: the filter 'wordwrap'"},
      {"{{ 'x'.zfill(3) }}", "line 1 column 7: the method 'zfill' of a string is not supported"},
      {"{{ cycler() }}", "'cycler' is undefined"},
      {"{{ 1 + }}", "line 1 column 8: expected an expression, got the end of the tag"},
      {"{{ a @ b }}", "line 1 column 6: unexpected character '@'"},
      {"{{ [1, 2 }}", "line 1 column 10: expected ']', got '}'"},
      {"{{ (1, [2] ", "line 1 column 4: '(' is not closed"},
      {"{{ [1, 2) }}", "line 1 column 9: expected ']', got ')'"},
      {"{% endfor %}", "'{% endfor %}' without the tag that opens it"},
      {"{% set a, b = 1, 2 %}", "unpacking) is not supported"},
      {"{{ nothing.field }}", "line 1 column 11: 'nothing' is undefined"},
      {"{{ 'a' + 1 }}", "unsupported operand types for '+': string and integer"},
      {"{{ 1 < 'a' }}", "cannot compare a integer with a string"},
      {"{% for x in 5 %}{% endfor %}", "line 1 column 13: cannot loop over it"},
      {"{% set x = 1 %}{% set x.y = 2 %}", "needs x to be a namespace()"},
  };
  for (const Case& c : cases) EXPECT_NE(error_of(c.source).find(c.expected), std::string::npos) << c.source << " -> " << error_of(c.source);
}

TEST(ChatTemplate, UnterminatedTagsCommentsStringsAndBlocksAreRefused) {
  EXPECT_NE(error_of("ab\n  {{ x").find("t line 2 column 3: unterminated tag: '{{' without '}}'"), std::string::npos)
      << error_of("ab\n  {{ x");
  EXPECT_NE(error_of("{% if x").find("line 1 column 1: unterminated tag: '{%' without '%}'"), std::string::npos);
  EXPECT_NE(error_of("{# never closed").find("unterminated comment"), std::string::npos);
  EXPECT_NE(error_of("{{ 'abc }}").find("line 1 column 4: unterminated string literal"), std::string::npos);
  EXPECT_NE(error_of("x\n{% if a %}\n{% for m in ms %}{% endif %}").find("line 3 column 18: '{% endif %}' without"),
            std::string::npos)
      << error_of("x\n{% if a %}\n{% for m in ms %}{% endif %}");
  EXPECT_NE(error_of("x\n {% if a %}yes").find("line 2 column 2: '{% if %}' is not closed"), std::string::npos)
      << error_of("x\n {% if a %}yes");
}

TEST(ChatTemplate, HostileTemplatesEndWithAnErrorNotACrashOrAHang) {
  // Deep nesting: refused before the parser's recursion could exhaust the stack.
  EXPECT_NE(error_of("{{" + std::string(100000, '(') + "1" + std::string(100000, ')') + "}}").find("nested more than"),
            std::string::npos);
  std::string deep_ifs;
  for (int i = 0; i < 10000; ++i) deep_ifs += "{% if true %}";
  EXPECT_NE(error_of(deep_ifs).find("nested more than"), std::string::npos);
  // Output that doubles each iteration, and loops that would run for ages: bounded.
  EXPECT_NE(error_of("{% set ns = namespace(s='xx') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                .find("the template builds more than"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000000 }}").find("line 1 column 8: the rendering exceeds 64 MiB"), std::string::npos)
      << error_of("{{ 'x' * 100000000 }}");
  EXPECT_NE(error_of("{% for i in range(2000) %}{{ 'x' * 60000 }}{% endfor %}").find("exceeds 64 MiB"),
            std::string::npos);
  EXPECT_NE(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
                .find("loop iterations"),
            std::string::npos);
  EXPECT_NE(error_of("{{ range(1000000000000) }}").find("too many items"), std::string::npos);
  // Values that double in size or depth each iteration, and work repeated on a large value.
  EXPECT_NE(error_of("{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}")
                .find("the template builds more than"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(x=1) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}")
                .find("a value nested more than 256 deep"),
            std::string::npos);
  EXPECT_NE(error_of("{% set big = range(90000) | list %}{% for i in range(90000) %}{% if big == big %}{% endif %}"
                     "{% endfor %}")
                .find("the template builds more than"),
            std::string::npos);
  // Deeply nested data from a file: printed, compared or serialized, refused rather than recursed into.
  Json deep = 1;
  for (int i = 0; i < 1000; ++i) deep = Json::array({std::move(deep)});
  EXPECT_NE(error_of("{{ d | tojson }}", {{"d", deep}}).find("nested more than"), std::string::npos);
  EXPECT_NE(error_of("{{ d }}", {{"d", deep}}).find("nested more than"), std::string::npos);
  EXPECT_NE(error_of("{{ d == d }}", {{"d", deep}}).find("nested more than"), std::string::npos);
  // Integer edge cases are errors, not undefined behaviour.
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ -(0 - 9223372036854775807 - 1) }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 // 0 }}").find("division by zero"), std::string::npos);
  EXPECT_EQ(render("{{ range(9223372036854775800, 9223372036854775807, 5) | length }}{{ [1, 2, 3][::9223372036854775807] }}"),
            "2[1]");
}
