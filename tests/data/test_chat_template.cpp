// Chat templates rendered by strata's Jinja subset and by python3-jinja2 configured as
// transformers configures it (tests/support/render_chat_template.py), compared byte for byte:
// the real templates of the Llama 3, Qwen2 and Mistral families over many conversations, and
// short templates that exercise each construct of the subset. Expected prompts are never
// written by hand: the oracle renders every case in one run of Debian's python3. Also: the
// constructs outside the subset refused when parsed, each naming itself and its line.
#include <gtest/gtest.h>

#include <iterator>
#include <map>
#include <random>

#include "strata/data/chat_template.h"
#include "test_support.h"

namespace strata {
namespace {

using jinja::Json;
using testing::TempDir;

std::string fixture(const std::string& name) {
  std::string text =
      testing::read_bytes(std::string(STRATA_SOURCE_DIR) + "/tests/data/chat_templates/" + name);
  EXPECT_FALSE(text.empty()) << "missing fixture " << name;
  return text;
}

// One rendering to compare: a model directory (its tokenizer_config.json) or a template file,
// a conversation, and add_generation_prompt.
struct Case {
  std::string label;
  std::string model_dir;
  std::string template_file;
  Json messages;
  Json tools;
  bool add_generation_prompt = true;
};

// The oracle's results for `cases`, in order: {"text"} or {"error", "kind"}.
Json render_with_jinja2(const std::vector<Case>& cases, const TempDir& dir) {
  Json request = Json::array();
  for (const Case& c : cases) {
    Json one = {{"messages", c.messages},
                {"tools", c.tools},
                {"add_generation_prompt", c.add_generation_prompt}};
    if (!c.model_dir.empty()) one["model_dir"] = c.model_dir;
    if (!c.template_file.empty()) one["chat_template_file"] = c.template_file;
    request.push_back(one);
  }
  testing::write_bytes(dir.file("cases.json"), request.dump());
  std::string errors;
  int status = testing::run_command(std::string(STRATA_TORCH_PYTHON) + " " +
                                        STRATA_CHAT_TEMPLATE_ORACLE + " batch " +
                                        dir.file("cases.json") + " > " + dir.file("results.json"),
                                    &errors);
  EXPECT_EQ(status, 0) << "the oracle (python3-jinja2, scripts/install-deps.sh) failed:\n"
                       << errors;
  Json results = Json::parse(testing::read_bytes(dir.file("results.json")), nullptr, false);
  EXPECT_TRUE(results.is_array() && results.size() == cases.size()) << errors;
  return results.is_array() ? results : Json::array();
}

// Where two renderings part, for a failure message that shows it.
std::string first_difference(const std::string& actual, const std::string& expected) {
  size_t at = 0;
  while (at < actual.size() && at < expected.size() && actual[at] == expected[at]) ++at;
  auto around = [&](const std::string& text) {
    size_t begin = at < 40 ? 0 : at - 40;
    return Json(text.substr(begin, 80)).dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  return str("byte ", at, " of ", actual.size(), " (strata) and ", expected.size(),
             " (jinja2):\n  strata: ", around(actual), "\n  jinja2: ", around(expected));
}

struct Tally {
  int equal = 0;    // rendered, byte for byte as jinja2 does
  int refused = 0;  // refused, as jinja2 refuses
};

// Renders every case with strata and compares it with jinja2's result.
Tally compare_with_jinja2(const std::vector<Case>& cases, const TempDir& dir) {
  Json expected = render_with_jinja2(cases, dir);
  Tally tally;
  for (size_t i = 0; i < cases.size() && i < expected.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.label + (c.add_generation_prompt ? " (generation prompt)" : ""));
    const Json& oracle = expected[i];
    std::string actual;
    try {
      ChatTemplate chat = ChatTemplate::from_model_dir(c.model_dir, c.template_file);
      actual = chat.render(c.messages, c.add_generation_prompt, c.tools);
    } catch (const jinja::RenderError& error) {
      if (!oracle.contains("error")) {
        ADD_FAILURE() << "strata refused what jinja2 renders: " << error.what();
      } else {
        if (oracle["kind"] == "TemplateError") {
          EXPECT_EQ(error.message(), oracle["error"]);
        }
        ++tally.refused;
      }
      continue;
    } catch (const std::exception& error) {
      ADD_FAILURE() << "strata failed: " << error.what();
      continue;
    }
    if (oracle.contains("error")) {
      ADD_FAILURE() << "strata rendered what jinja2 refuses (" << oracle["kind"] << ": "
                    << oracle["error"] << "):\n"
                    << actual;
      continue;
    }
    const std::string& text = oracle["text"].get_ref<const std::string&>();
    if (actual == text) {
      ++tally.equal;
    } else {
      ADD_FAILURE() << "the prompts differ at " << first_difference(actual, text);
    }
  }
  return tally;
}

// --- the families

struct Family {
  std::string name;
  std::string fixture;
  Json tokens;  // the special tokens of its tokenizer_config.json
};

Json added_token(const std::string& content) {
  return {{"__type", "AddedToken"}, {"content", content}, {"lstrip", false},
          {"normalized", false},    {"rstrip", false},    {"single_word", false}};
}

std::vector<Family> families() {
  Json llama = {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}};
  Json qwen = {{"bos_token", nullptr},
               {"eos_token", "<|im_end|>"},
               {"pad_token", "<|endoftext|>"},
               {"unk_token", nullptr}};
  // Mistral v0.1's config holds its tokens as AddedToken objects; the later ones as strings.
  Json mistral_objects = {{"bos_token", added_token("<s>")},
                          {"eos_token", added_token("</s>")},
                          {"unk_token", added_token("<unk>")}};
  Json mistral = {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}};
  return {{"Llama 3 Instruct", "llama3_instruct.jinja", llama},
          {"Llama 3.1 Instruct", "llama3.1_instruct.jinja", llama},
          {"Qwen2 Instruct", "qwen2_instruct.jinja", qwen},
          {"Qwen2.5 Instruct", "qwen2.5_instruct.jinja", qwen},
          {"Mistral 7B Instruct v0.1", "mistral_instruct_v0.1.jinja", mistral_objects},
          {"Mistral 7B Instruct v0.3", "mistral_instruct_v0.3.jinja", mistral},
          {"Mistral Nemo Instruct 2407", "mistral_nemo_instruct_2407.jinja", mistral}};
}

Json message(const std::string& role, Json content) {
  return {{"role", role}, {"content", std::move(content)}};
}

Json weather_tools() {
  return Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather",
      "description": "Météo actuelle d'une ville — \"quoted\"",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "e.g. Zürich"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "description": "Adds two numbers.",
      "parameters": {"type": "object", "properties": {"a": {"type": "number"},
        "b": {"type": "integer", "minimum": -1.5, "maximum": 1e21}}, "required": []},
      "return": {"type": "number"}}}])");
}

Json tool_call(const std::string& id, const std::string& name, Json arguments) {
  return {{"id", id},
          {"type", "function"},
          {"function", {{"name", name}, {"arguments", std::move(arguments)}}}};
}

// Conversations every family renders (or refuses, as jinja2 does): {messages, tools}.
std::vector<std::pair<std::string, Json>> conversations() {
  std::vector<std::pair<std::string, Json>> all;
  auto add = [&](std::string name, Json messages, Json tools = nullptr) {
    all.emplace_back(std::move(name), Json{{"messages", std::move(messages)}, {"tools", tools}});
  };
  add("one user turn", {message("user", "Hello!")});
  add("system and user", {message("system", "You are terse."), message("user", "Hi")});
  add("multi-turn",
      {message("user", "What is 2+2?"), message("assistant", "4"), message("user", "And 3+3?")});
  add("system, two full exchanges",
      {message("system", "Be brief."), message("user", "a"), message("assistant", "b"),
       message("user", "c"), message("assistant", "d")});
  add("empty content", {message("user", "")});
  add("empty system", {message("system", ""), message("user", "x")});
  add("unicode and emoji",
      {message("user", "Grüße, 世界! 🙂🚀 مرحبا ñ"),
       message("assistant", "Ça va — très bien 👍"), message("user", "Ω≈ç√∫˜µ≤≥÷ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢")});
  add("quotes and template syntax",
      {message("user", "He said \"hi\" & 'bye' <tag> {{ x }} {% if %} {# c #} \\ \\n")});
  add("surrounding whitespace",
      {message("system", "  \n sys \t"), message("user", "\n\n  padded  \n"),
       message("assistant", "  answer\n"), message("user", "\t")});
  add("unicode whitespace", {message("user", "\u00a0\u2003nbsp and em space\u3000\u00a0")});
  add("special tokens in content",
      {message("user", "<|im_end|> [INST] </s> <|eot_id|> <s>"), message("assistant", "[/INST]")});
  add("newlines and tabs", {message("user", "line 1\nline 2\r\n\ttabbed\n")});
  add("assistant first", {message("assistant", "I start."), message("user", "ok")});
  add("two user turns", {message("user", "a"), message("user", "b")});
  add("system only", {message("system", "Only a system prompt.")});
  add("system in the middle",
      {message("user", "a"), message("system", "late"), message("user", "b")});
  add("unknown role", {message("function", "result"), message("user", "x")});
  add("key order reversed", {Json{{"content", "reversed keys"}, {"role", "user"}}});
  add("no messages", Json::array());
  Json long_chat = Json::array();
  for (int turn = 0; turn < 12; ++turn) {
    long_chat.push_back(message("user", str("question ", turn)));
    long_chat.push_back(message("assistant", str("answer ", turn)));
  }
  long_chat.push_back(message("user", "last"));
  add("24 turns", long_chat);
  add("same user message twice",
      {message("user", "same"), message("assistant", "x"), message("user", "same")},
      weather_tools());
  add("tools", {message("user", "Weather in Zürich?")}, weather_tools());
  add("tools with a system prompt",
      {message("system", "Use tools."), message("user", "Add 2 and 3")}, weather_tools());
  add("tools, no user message", {message("system", "Use tools.")}, weather_tools());
  Json call = message("assistant", nullptr);
  call["tool_calls"] = {
      tool_call("call12345", "get_weather", {{"city", "Zürich"}, {"unit", "celsius"}})};
  Json result = message("tool", "{\"temperature\": 21.5}");
  result["tool_call_id"] = "call12345";
  add("a tool call and its result",
      {message("user", "Weather in Zürich?"), call, result, message("assistant", "21.5 °C.")},
      weather_tools());
  Json bad_id = call;
  bad_id["tool_calls"][0]["id"] = "short";
  Json bad_result = result;
  bad_result["tool_call_id"] = "short";
  add("a tool call id of the wrong length", {message("user", "Weather?"), bad_id, bad_result},
      weather_tools());
  Json two_calls = call;
  two_calls["tool_calls"].push_back(tool_call("call67890", "add", {{"a", 1}, {"b", 2.5}}));
  Json result2 = message("tool", "3.5");
  result2["tool_call_id"] = "call67890";
  add("two tool calls at once", {message("user", "Both?"), two_calls, result, result2});
  Json dict_result = message("tool", Json{{"temperature", 21.5}, {"sky", "clear ☀"}});
  dict_result["tool_call_id"] = "call12345";
  add("a tool result that is an object", {message("user", "Weather?"), call, dict_result});
  add("content that is a number", {message("user", 42)});
  return all;
}

// `count` seeded conversations of random turns and random text from fragments that templates
// and tokenizers find hard: whitespace of every kind, quotes, template syntax, special tokens,
// and now and then content that is not a string.
std::vector<std::pair<std::string, Json>> random_conversations(int count, uint32_t seed) {
  const char* const fragments[] = {"",       " ",     "\n",     "\t",         "\r\n",   "hello",
                                   "Grüße",  "🙂",  "\u00a0", "\"",         "'",      "\\",
                                   "{{",     "%}",    "{#",     "<|im_end|>", "[INST]", "</s>",
                                   "日本語", "  x  ", "\u2028", "\x7f",       "Σ",      "-->"};
  std::mt19937 random(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(random() % n); };
  auto text = [&]() {
    std::string out;
    for (size_t i = pick(6); i > 0; --i) out += fragments[pick(std::size(fragments))];
    return out;
  };
  std::vector<std::pair<std::string, Json>> all;
  for (int c = 0; c < count; ++c) {
    Json messages = Json::array();
    bool alternate = pick(3) != 0;  // most follow the rules; the rest are any order of roles
    if (pick(2)) messages.push_back(message("system", text()));
    for (size_t turn = 0, turns = pick(6); turn < turns; ++turn) {
      const char* const roles[] = {"user", "assistant", "system", "tool"};
      std::string role = alternate ? (turn % 2 == 0 ? "user" : "assistant") : roles[pick(4)];
      Json content = text();
      if (pick(12) == 0) content = Json::array({{{"type", "text"}, {"text", text()}}});
      if (pick(20) == 0) content = nullptr;
      messages.push_back(message(role, content));
    }
    all.emplace_back(
        str("random conversation ", c, " (seed ", seed, "): ", messages.dump()),
        Json{{"messages", messages}, {"tools", pick(4) == 0 ? weather_tools() : nullptr}});
  }
  return all;
}

TEST(ChatTemplate, TheThreeFamiliesRenderAsJinja2DoesByteForByte) {
  TempDir dir;
  std::vector<Case> cases;
  std::map<std::string, std::string> model_dirs;
  for (const Family& family : families()) {
    std::string model_dir = dir.file(family.fixture + ".model");
    testing::run_command("mkdir -p " + model_dir);
    Json config = family.tokens;
    config["chat_template"] = fixture(family.fixture);
    config["tokenizer_class"] = "PreTrainedTokenizerFast";
    testing::write_bytes(model_dir + "/tokenizer_config.json", config.dump(2));
    std::vector<std::pair<std::string, Json>> chats = conversations();
    for (auto& random_chat : random_conversations(40, 34)) chats.push_back(random_chat);
    for (const auto& [name, chat] : chats) {
      for (bool generation_prompt : {true, false}) {
        cases.push_back({family.name + ", " + name, model_dir, "", chat["messages"], chat["tools"],
                         generation_prompt});
      }
    }
  }
  Tally tally = compare_with_jinja2(cases, dir);
  std::cout << "chat templates of 7 models: " << tally.equal
            << " renderings equal jinja2's byte for byte, " << tally.refused
            << " conversations refused as jinja2 refuses them\n";
  EXPECT_GE(tally.equal, 600);
  EXPECT_GE(tally.refused, 20);  // alternation, tool-call ids, a number added to a string, ...
}

TEST(ChatTemplate, RaiseExceptionReachesTheCallerWithItsMessage) {
  ChatTemplate chat(fixture("mistral_instruct_v0.1.jinja"), "mistral",
                    {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  try {
    chat.render(Json::array({message("assistant", "first")}), true);
    FAIL() << "the template accepted an assistant turn first";
  } catch (const jinja::RenderError& error) {
    EXPECT_EQ(error.message(),
              "Conversation roles must alternate user/assistant/user/assistant/...");
    EXPECT_NE(std::string(error.what()).find("mistral line 1"), std::string::npos) << error.what();
  }
}

// --- loading

TEST(ChatTemplate, LoadsTheDefaultOfNamedTemplatesAndTheOverrideFile) {
  TempDir dir;
  Json config = {
      {"bos_token", added_token("<B>")},
      {"chat_template", Json::array({{{"name", "tool_use"}, {"template", "tools"}},
                                     {{"name", "default"},
                                      {"template", "{{ bos_token }}{{ messages[0].content }}"}}})}};
  testing::write_bytes(dir.file("tokenizer_config.json"), config.dump());
  Json messages = Json::array({message("user", "hi")});
  EXPECT_EQ(ChatTemplate::from_model_dir(dir.path()).render(messages, true), "<B>hi");
  testing::write_bytes(dir.file("override.jinja"), "[{{ messages | length }}]\n");
  EXPECT_EQ(
      ChatTemplate::from_model_dir(dir.path(), dir.file("override.jinja")).render(messages, true),
      "[1]");  // jinja2 drops the file's final newline
}

TEST(ChatTemplate, ADirectoryWithoutATemplateIsAnErrorNamingTheFile) {
  TempDir dir;
  testing::write_bytes(dir.file("tokenizer_config.json"), R"({"bos_token": "<s>"})");
  try {
    ChatTemplate::from_model_dir(dir.path());
    FAIL() << "loaded a template that is not there";
  } catch (const UserError& error) {
    EXPECT_NE(
        std::string(error.what()).find(dir.file("tokenizer_config.json") + " has no chat_template"),
        std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("--chat-template"), std::string::npos);
  }
  TempDir empty;
  EXPECT_THROW(ChatTemplate::from_model_dir(empty.path()), UserError);
}

// --- the subset, construct by construct

// Short templates, each exercising constructs of the subset, rendered with this context:
// messages (below), tools null, add_generation_prompt, bos_token "<s>", eos_token "</s>".
const char* const kSnippets[] = {
    // whitespace control: trim_blocks, lstrip_blocks, -, + and comments
    "a\n  {% if true %}\n  b\n  {% endif %}\n  c\n",
    "a  {# c #}\nb {%+ if true %}x{% endif +%}\ny\n   {#- gone -#}   z\n",
    "x {{- ' y ' -}} z\n{%- for m in messages -%}\n  [{{ m.role }}]\n{%- endfor %}\n\n",
    "\t  {% set x = 1 %}  \n{{ x }}\n{% if x %}   \n{% endif %}end{{+1}}{{-+1}}",
    "{# comment\n over lines #}\n{% for i in [1, 2] %}\n    {{ i }}\n{% endfor %}\r\nwin\r\n",
    // literals, escapes and printing Python values
    R"J({{ 'a\tb\\n\x41\u00e9\U0001F600\101' }}|{{ "d\"q" ~ 'it\'s' }}|{{ 'un\known' }})J",
    "{{ [1, 'a', none, true, 1.5, 2.0, 1e-5, 1.5e20, 123456789.123, {'k': \"it's\", 'q': 'a\"b'}] "
    "}}",
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 - -1 }} {{ 0.1 "
    "+ 0.2 }}",
    "{{ {'a': 1, 'b': [1, 2]} }} {{ 'x' * 3 }} {{ [1] + [2] }} {{ none }} {{ undefined_name }}",
    // tests
    "{% for v in [none, 1, 1.5, 'a', [1], {'a': 1}, true] %}{{ v is none }}{{ v is string }}"
    "{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is mapping }}{{ v is iterable }}"
    "{{ v is sequence }}{{ v is boolean }}{{ v is defined }};{% endfor %}{{ nope is defined }}"
    "{{ nope is iterable }}{{ 4 is divisibleby 2 }}{{ 3 is odd }}{{ 'a' is in 'abc' }}"
    "{{ 2 is equalto 2 }}{{ 'ab' is lower }}",
    // comparisons and logic
    "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 'b' in 'abc' }} "
    "{{ 3 not in [1, 2] }} {{ 'k' in {'k': 1} }} {{ none or 'x' }} {{ '' and 'y' }} "
    "{{ not messages }} {{ 'yes' if messages else 'no' }} {{ 'z' if false }}| {{ {'a': 1, 'b': 2} "
    "== {'b': 2, 'a': 1} }}",
    // loops: loop.*, filters, else, break, continue, tuple unpacking, scoping
    "{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
    "{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }} {% endfor %}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }}{{ ',' if not "
    "loop.last }}{% endfor %}"
    "{% for x in [] %}no{% else %}empty{% endfor %}"
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% "
    "endif %}{{ i }}{% endfor %}",
    "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in {'c': 3} "
    "| items %}{{ k }}{{ v }}{% endfor %}"
    "{% for c in 'héllo' %}{{ c }}.{% endfor %}{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}",
    "{% set x = 'outer' %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}"
    "{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% set "
    "ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }}{{ ns.s }}",
    // subscripts and slices
    "{{ messages[0]['role'] }} {{ messages[-1].content }} {{ messages[1:] | length }} {{ "
    "messages[:-1] | length }} "
    "{{ 'héllo'[1:4] }} {{ 'abcdef'[::2] }} {{ 'abcdef'[::-1] }} {{ [1, 2, 3][-2:] }} {{ "
    "messages[99] is defined }} "
    "{{ messages[0].nope is defined }} {{ 'abc'.nope is defined }} {{ 'abc'[1] }}",
    // filters
    "{{ '  x  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ [1, 2, 3] | length }}|{{ 'héllo' | length "
    "}}|{{ {'a': 1} | count }}"
    "|{{ 'Hello World' | upper }}|{{ 'Hello World' | lower }}|{{ 'hello wORLD' | capitalize }}|{{ "
    "'hello world' | title }}"
    "|{{ [1, 'a'] | join('-') }}|{{ 'abc' | list }}|{{ [3, 1] | first }}{{ [3, 1] | last }}|{{ "
    "nope | default('dflt') }}"
    "|{{ '' | default('e', true) }}|{{ 'a-b-c' | replace('-', '+') }}|{{ 12 | string }}|{{ none | "
    "string }}",
    "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}|{{ messages | "
    "rejectattr('role', '==', 'user') | list | length }}"
    "|{{ [1, none, 0, 'a'] | select | list }}|{{ ['a', 'b', 'code'] | reject('equalto', 'code') | "
    "join(', ') }}"
    "|{{ messages | selectattr('content') | list | length }}",
    // Unicode: case mappings, Python's repr of unprintable characters, code point lengths
    R"J({{ 'straße ǆ éclair ﬁ'|upper }} {{ 'ÀÉÎ ΣΑΣ ΟΔΟΣ'|lower }} {{ 'élan VITAL'|capitalize }} {{ 'ßig'|capitalize }})J"
    R"J( {{ "they're 3rd-time  ǆx ßig [wOrd] (x{y<z"|title }} {{ 'é' is lower }}{{ 'É' is upper }}{{ 'ǅ' is upper }}{{ '1' is lower }})J"
    R"J( {{ ['a b', 'z​w', '', '', 'é😀', '󠀁', ' ', 'tab	here'] }})J"
    R"J( {{ 'ÉCOLE'.lower() }}{{ 'ß'.upper() }} {{ "they're 3rd-time ǆx ßig [wOrd] (x".title() }} {{ 'é😀' | length }} {{ 'é😀'[1] }})J",
    // tojson as transformers defines it
    "{{ {'b': [1, 2.5, {'c': none}], 'a': 'é\"\\n<tag>&', 'e': [], 'f': {}} | tojson }}\n"
    "{{ {'b': [1, {'c': true}], 'a': 'x', 'e': []} | tojson(indent=2) }}\n"
    "{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }} {{ 'é😀' | tojson(ensure_ascii=true) }} {{ "
    "messages[0] | tojson }}",
    // string methods
    "{{ '  a b  '.strip() }}|{{ 'xxa'.lstrip('x') }}|{{ 'a  '.rstrip() }}|{{ "
    "'hello'.startswith('he') }}"
    "{{ 'hello'.endswith(('lo', 'x')) }}|{{ ' a  b\tc '.split() }}|{{ 'a,b,,c'.split(',') }}|{{ "
    "'a,b,c'.split(',', 1) }}"
    "|{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ {'k': 1}.get('k') "
    "}}{{ {'k': 1}.get('z', 'd') }}"
    "{{ {'k': 1}.get('z') }}|{{ {'a': 1, 'b': 2}.keys() | list }}{{ {'a': 1}.values() | list }}",
    // globals
    "{{ raise_exception is defined }} {{ strftime_now is defined }} {{ namespace is defined }}"
    " {{ strftime_now('%Y') | length }} {{ range(3) | list }} {{ range(1, 7, 2) | list }}",
    "{% if messages | length > 1 %}{{ raise_exception('Too many messages: ' ~ messages | length) "
    "}}{% endif %}",
    // what jinja2 refuses at render time, strata refuses too
    "{{ 'a' + 1 }}",
    "{{ nope.attribute }}",
    "{{ nope + 'x' }}",
    "{{ 1 < 'a' }}",
    "{% set x = 5 %}{% set x.y = 1 %}",
};

TEST(JinjaSubset, EachConstructRendersAsJinja2Does) {
  TempDir dir;
  testing::write_bytes(dir.file("tokenizer_config.json"),
                       R"({"bos_token": "<s>", "eos_token": "</s>"})");
  Json messages = Json::array(
      {message("system", "sys"), message("user", "Hello \"you\""), message("assistant", "ok")});
  std::vector<Case> cases;
  int index = 0;
  for (const char* snippet : kSnippets) {
    std::string file = dir.file(str("snippet", index++, ".jinja"));
    testing::write_bytes(file, snippet);
    cases.push_back({str("snippet ", index - 1, ": ", Json(std::string(snippet)).dump()),
                     dir.path(), file, messages, nullptr, true});
  }
  Tally tally = compare_with_jinja2(cases, dir);
  EXPECT_EQ(tally.equal + tally.refused, static_cast<int>(cases.size()));
  EXPECT_EQ(tally.refused, 6);
}

// Python's integers are unbounded; strata's stop at 64 bits, and past them it refuses.
TEST(JinjaSubset, IntegersBeyond64BitsAreRefusedNotWrapped) {
  auto render = [](const std::string& source) {
    return jinja::Template(source, "t.jinja").render(Json::object());
  };
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ -9223372036854775807 - 1 }} {{ 1 ** 1000000000000 }}"),
            "4611686018427387904 -9223372036854775808 1");
  for (const char* overflow :
       {"{{ 9223372036854775807 + 1 }}", "{{ 3037000500 * 3037000500 }}", "{{ 2 ** 63 }}",
        "{{ -(-9223372036854775807 - 1) }}", "{{ (-9223372036854775807 - 1) // -1 }}"}) {
    EXPECT_THROW(
        {
          try {
            render(overflow);
          } catch (const jinja::RenderError& error) {
            EXPECT_NE(std::string(error.what()).find("integer overflow"), std::string::npos);
            throw;
          }
        },
        jinja::RenderError)
        << overflow;
  }
}

// --- what the subset refuses, when the template is parsed

void expect_refused(const std::string& source, const std::vector<std::string>& parts) {
  try {
    jinja::Template parsed(source, "t.jinja");
    ADD_FAILURE() << "parsed a template outside the subset: " << source;
  } catch (const UserError& error) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(error.what()).find(part), std::string::npos)
          << "\"" << error.what() << "\" does not say \"" << part << "\"";
    }
  }
}

TEST(JinjaSubset, ConstructsOutsideTheSubsetAreRefusedWhenParsedNamingThemselves) {
  expect_refused("{% macro f() %}x{% endmacro %}", {"t.jinja line 1", "unsupported tag", "macro"});
  expect_refused("a\n{% include 'other.jinja' %}", {"line 2", "include"});
  expect_refused("{% import 'x' as y %}", {"import"});
  expect_refused("{% extends 'base' %}", {"extends"});
  expect_refused("{% block b %}{% endblock %}", {"block"});
  expect_refused("{% raw %}{{ x }}{% endraw %}", {"raw"});
  expect_refused("{% call f() %}{% endcall %}", {"call"});
  expect_refused("{% filter upper %}x{% endfilter %}", {"filter"});
  expect_refused("{% with x = 1 %}{% endwith %}", {"with"});
  expect_refused("{% do x.append(1) %}", {"do"});
  expect_refused("\n\n{{ messages | wordcount }}", {"line 3", "unsupported filter 'wordcount'"});
  expect_refused("{{ x | map(attribute='a') }}", {"unsupported filter 'map'"});
  expect_refused("{% if x is sameas y %}{% endif %}", {"unsupported test 'is sameas'"});
  expect_refused("{{ 'a {}'.format(1) }}", {"unsupported method '.format()'"});
  expect_refused("{{ messages.append(1) }}", {"unsupported method '.append()'"});
  expect_refused("{{ lipsum(2) }}", {"unsupported function 'lipsum()'"});
  expect_refused("{% for m in messages %}{{ loop.cycle('a', 'b') }}{% endfor %}",
                 {"unsupported loop attribute 'loop.cycle'"});
  expect_refused("{% for m in messages %}{{ loop.previtem }}{% endfor %}", {"loop.previtem"});
  expect_refused("{% set x %}body{% endset %}", {"block '{% set name %}"});
  expect_refused("{% for m in messages recursive %}{% endfor %}", {"recursive"});
  expect_refused("{% if x %}never closed", {"line 1", "never closed", "endif"});
  expect_refused("{% for m in messages %}", {"never closed", "endfor"});
  expect_refused("{% endif %}", {"without its opening tag"});
  expect_refused("{{ x ", {"never closed"});
  expect_refused("{{ 'unterminated }}", {"string literal is never closed"});
  expect_refused("{{ x @ y }}", {"unexpected character '@'"});
  expect_refused("{# open comment", {"comment"});
  expect_refused("{{ x.y() }}", {"unsupported method '.y()'"});
  expect_refused("{{ (1, 2) }}", {"a tuple outside a call's arguments"});
  expect_refused("{{ range((1, 2) + (3,)) }}", {"a tuple outside a call's arguments"});
}

}  // namespace
}  // namespace strata
