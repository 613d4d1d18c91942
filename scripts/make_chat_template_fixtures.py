#!/usr/bin/env python3
"""Writes tests/fixtures/chat_templates/cases.json: chat templates of real models rendered by
Python's jinja2 the way transformers' apply_chat_template(tokenize=False) renders them, for
tests/io/chat_template_test.cpp to compare trireme's renderer against.

The environment is transformers': ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True) with the loopcontrols extension, tojson = json.dumps(ensure_ascii=False, ...)
and a raise_exception global. Needs only jinja2 (Debian: python3-jinja2); the tests do not run it:

  python3 scripts/make_chat_template_fixtures.py [--out tests/fixtures/chat_templates/cases.json]

Each case: the template's name, the conversation's name, add_generation_prompt, the variables
(bos_token, eos_token, tools when given), and either "expected" (the text) or "error" (the
message a raise_exception gave). Each snippet: a small template and its rendering of
snippet_messages.
"""
import argparse
import json
import os

import jinja2
import jinja2.ext
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

# The templates as the models' tokenizer_config.json files hold them.
TEMPLATES = {
    # Qwen2-Instruct: ChatML with a default system message.
    "qwen2": (
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    ),
    # Qwen2.5-Instruct: a system-message branch, tools, tool calls and tool responses.
    "qwen2_5": """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
""",
    # Llama-3-Instruct.
    "llama3": (
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
        "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
        "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
        "{% endif %}"
    ),
    # Llama-2-chat: [INST] turns, the system message inside the first, roles must alternate.
    "llama2": (
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
        "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
        "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if loop.index0 == 0 and system_message != false %}"
        "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
        "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
        "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
        "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
    ),
    # Mistral-Instruct (v0.3 style): the system message joins the last user turn.
    "mistral": """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.last and system_message is defined %}
            {{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}
        {%- else %}
            {{- '[INST] ' + message['content'] + '[/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content']|trim + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
""",
    # The rest of the subset trireme supports, with the whitespace rules in block-per-line style.
    "features": """{#- a comment that strips around it -#}
{% set ns = namespace(turns=0, last_user='') %}
{% for m in messages if m.role != 'system' %}
  {% set ns.turns = ns.turns + 1 %}
  {% if m.role == 'user' %}{% set ns.last_user = m.content %}{% endif %}
  [{{ loop.index }}/{{ loop.length }} {{ loop.index0 }} {{ loop.revindex }} {{ 'first' if loop.first else ('last' if loop.last else 'mid') }}] {{ m.role | upper }}: {{ m['content'] | trim | default('(none)', true) }}
{% endfor %}
turns={{ ns.turns }} last_user={{ ns.last_user | length }} chars
{{- ' | ' ~ messages | length ~ ' messages' }}
first={{ messages[0].role }} last={{ messages[-1]['role'] }} rest={{ messages[1:] | length }} rev={{ (messages | map(attribute='role') | list)[::-1] | join(',') }}
{% if messages[0].content is string and messages[0].name is not defined and none is none %}tests ok{% endif %}

{%+ if 'user' in messages | map(attribute='role') | list %}  has user{% endif %}
{% set greeting = "tab\\there, quote\\" and \\'single\\', slash \\\\ \\u00e9" %}
{{ greeting }}
{{ {'k': [1, 2, none, true], 'cn': '中文'} | tojson }} {{ [1, 'a'] | tojson(indent=2) }}
{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 10 / 4 }} {{ 3 > 2 and 2 >= 2 and 1 < 2 <= 2 }}
{{ 'a,b,,c'.split(',') }} {{ '  x y  '.split() }} {{ 'Hello World'.lower() }} {{ 'abc'.startswith('ab') }} {{ none }} {{ undefined_name }}|{{ true }}
{% for k, v in {'x': 1, 'y': 2}.items() %}{{ k }}={{ v }}{{ ',' if not loop.last }}{% endfor %}

{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}
{% for x in [] %}never{% else %}empty loop{% endfor %}
{%- if add_generation_prompt -%}
  >>> {{ messages[-1].content[:3] }}{{ messages[-1].content[-2:] }}
{%- endif %}
""",
}

# Small templates for the corners of the subset (whitespace rules, operators, filters, Python's
# printing of values), each rendered with SNIPPET_MESSAGES.
SNIPPETS = [
 "  {% if true %}x{% endif %}  \n  y",
 "a\n  {%- if true %}\n b {% endif -%}\n\n c\n",
 "{% if true %}\r\nx\r\n{% endif %}\r\n",
 "a {#- c #}\n b",
 "  {# c #}\n  {{ 'v' }}\n",
 "{{ 'a' }}\n{% if true %}\n{{ 'b' }}\n{% endif %}\n",
 "{%+ if true %}x{%+ endif %}\n",
 "  {%+ if true %}x{% endif +%}\ny",
 "{% for i in [1,2,3] %}\n  {{ i }}\n{% endfor %}\n",
 "{%- for m in messages -%}\n  <{{ m.role }}>{{ m.content }}\n{%- endfor -%}\n",
 "{{ messages | tojson(indent=2) }}",
 "{{ messages[0] }}",
 "{{ messages | map(attribute='role') | join('|') }}",
 "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}",
 "{{ (messages | rejectattr('role', 'eq', 'user') | first).content }}",
 "{{ 'Hello World'.split(' ') }} {{ ' a '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a-b-c'.split('-', 1) }}",
 "{{ 'abc'.upper() }}{{ 'ABC'|lower }}{{ 'hello world'|title }}{{ 'hELLO'|capitalize }}",
 "{{ 10 / 3 }} {{ 2 ** 0.5 }} {{ 1.0 }} {{ 3.14 }} {{ -5 % 3 }} {{ 7.5 // 2 }}",
 "{{ [1,2] + [3] }} {{ 'ab' * 3 }} {{ 1 ~ 2 }} {{ none ~ '' }} {{ true ~ false }}",
 "{{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b') }} {{ {'a': 1}.get('b', 2) }}",
 "{% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}{{ v }}{% endfor %}",
 "{{ messages[-1].content[::-1] }}|{{ messages[0].content[1:-1] }}",
 "{{ 'x' if false }}|{{ 'y' if 0 else 'z' }}|{{ not none }}",
 "{{ 1 in [1, 2] }} {{ 'a' in 'cat' }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}",
 "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1] == [1] }} {{ {'a':1,'b':2} == {'b':2,'a':1} }}",
 "{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]",
 "{% for i in range(3) %}{{ loop.revindex0 }}{{ loop.first }}{% else %}none{% endfor %}",
 "{% for m in messages if m.role == 'assistant' %}{{ loop.index }}/{{ loop.length }}{% endfor %}",
 "{{ messages | length > 1 and messages[0].role == 'system' }}",
 "{{ 'it''s' }} {{ \"a\" 'b' }} {{ '\\u4e2d\\x41\\n' }}",
 "{{ messages[5] is defined }} {{ messages[0]['nope'] is none }} {{ x is undefined }}",
 "{{ 42 | string | length }} {{ '12' | int + 1 }} {{ 'x' | int }} {{ 3.9 | int }}",
 "{{ [3, 1, 2] | reverse | list }} {{ 'abc' | reverse }} {{ [] | first }}|{{ 'abc' | first }}",
 "{{ 'a\"b' | tojson }} {{ {'k': 'v\\n'} | tojson(sort_keys=true) }} {{ none | tojson }} {{ 1.5 | tojson }}",
 "{{ ['a', \"b'c\", 'd\"e', \"f'g\\\"h\"] }}",
 "{{ {'x': [1, {'y': none}]} }}",
 "{{ range(2, 10, 3) | list }} {{ range(5, 0, -2) | list }}",
 "{{ (1 + 2) ~ 3 }} {{ 2 * 3 ~ 4 }} {{ 'a' ~ 2 * 3 }}",
 "{{ -1 | abs if false else 0 }}",
 "{% set ns = namespace(found=false) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
 "{{ messages[0].content | replace('a', 'A') }} {{ 'aaa'.replace('a', 'b', 2) }}",
 "{{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith('bc') }} {{ 'abc'.find('c') }} {{ '中文c'.find('c') }}",
 "{{ 'x,y'.split(',') | join(', ') }}",
 "{{ messages | items if false else 'ok' }}",
 "{{ 2 < 3 < 4 }} {{ 2 < 3 > 4 }} {{ 1 == 1 == 1 }}",
 "{{ 'a' is string }} {{ 1 is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ [] is sequence }} {{ {} is mapping }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'ab' is lower }}",
]
SNIPPET_MESSAGES = [{"role": "system", "content": "Sys"}, {"role": "user", "content": "héllo 中文"},
                    {"role": "assistant", "content": "ans"}]

TOKENS = {
    "qwen2": ("", "<|im_end|>"),
    "qwen2_5": ("", "<|im_end|>"),
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama2": ("<s>", "</s>"),
    "mistral": ("<s>", "</s>"),
    "features": ("<s>", "</s>"),
}

CONVERSATIONS = {
    "single_turn": [
        {"role": "user", "content": "Hello, who are you?"},
        {"role": "assistant", "content": "I am a helpful assistant."},
    ],
    "chinese_with_system": [
        {"role": "system", "content": "你是一个乐于助人的助手。"},
        {"role": "user", "content": "床前明月光的下一句是什么？"},
        {"role": "assistant", "content": "疑是地上霜。"},
    ],
    "multi_turn": [
        {"role": "user", "content": "  What is 2 + 2?  \n"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And {{ 3 }} + 3? Quote \" and 'single' and \\ backslash."},
        {"role": "assistant", "content": "\t6\n"},
    ],
    "empty_content": [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
    ],
    "ends_with_user": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a colour."},
    ],
    "bad_role_order": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ],
    "tool_use": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "°C"}}}]},
        {"role": "tool", "content": "{\"temperature\": 21}"},
        {"role": "tool", "content": "sunny"},
        {"role": "assistant", "content": "It is 21 °C and sunny in Paris."},
    ],
}

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city, now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                   "required": ["city"]}}}]


def environment():
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def main():
    parser = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "chat_templates", "cases.json"))
    args = parser.parse_args()
    env = environment()
    cases = []
    for tname, source in TEMPLATES.items():
        template = env.from_string(source)
        bos, eos = TOKENS[tname]
        for cname, messages in CONVERSATIONS.items():
            if cname == "tool_use" and tname != "qwen2_5":
                continue
            for gen in (False, True):
                variables = {"bos_token": bos, "eos_token": eos}
                if cname == "tool_use":
                    variables["tools"] = TOOLS
                case = {"template": tname, "conversation": cname, "add_generation_prompt": gen,
                        "variables": variables}
                try:
                    case["expected"] = template.render(messages=messages, add_generation_prompt=gen, **variables)
                except TemplateError as e:
                    case["error"] = str(e)
                cases.append(case)
    snippets = [{"template": t, "expected": env.from_string(t).render(messages=SNIPPET_MESSAGES)} for t in SNIPPETS]
    out = {"jinja2_version": jinja2.__version__, "templates": TEMPLATES, "conversations": CONVERSATIONS,
           "cases": cases, "snippet_messages": SNIPPET_MESSAGES, "snippets": snippets}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases, {len(snippets)} snippets -> {args.out}")


if __name__ == "__main__":
    main()
