#!/usr/bin/env python3
"""The reference renderer of chat templates: python3-jinja2 configured exactly as transformers'
apply_chat_template configures it (ImmutableSandboxedEnvironment with trim_blocks and
lstrip_blocks, the loopcontrols extension, raise_exception and strftime_now globals, tojson as
json.dumps(ensure_ascii=False)), with the variables it passes: messages, tools, documents,
add_generation_prompt and the tokenizer's special tokens. strata's C++ renderer
(src/strata/data/chat_template.h) is tested against it byte for byte.

  render_chat_template.py render DIR MESSAGES.json [--chat-template FILE] [--no-generation-prompt]
      prints the prompt, as `strata tokenize --tokenizer DIR --chat MESSAGES.json` does
  render_chat_template.py batch CASES.json
      renders every case of [{"model_dir", "chat_template_file"?, "messages", "tools"?,
      "add_generation_prompt"}] and prints [{"text"} or {"error"}] as JSON
"""
import argparse
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                  "mask_token")


def environment():
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(token):
    """A special token as transformers' special_tokens_map holds it: AddedToken -> its content."""
    if isinstance(token, dict):
        return token.get("content")
    return token


def load(model_dir, chat_template_file):
    """The template and the special-token variables, as transformers reads tokenizer_config.json."""
    config = {}
    config_path = os.path.join(model_dir, "tokenizer_config.json") if model_dir else None
    if config_path and os.path.exists(config_path):
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    template = config.get("chat_template")
    if isinstance(template, list):
        template = {t["name"]: t["template"] for t in template}.get("default")
    if chat_template_file:
        with open(chat_template_file, encoding="utf-8") as f:
            template = f.read()
    variables = {}
    for key in SPECIAL_TOKENS:
        value = token_text(config.get(key))
        if value is not None:
            variables[key] = value
    if "additional_special_tokens" in config:
        variables["additional_special_tokens"] = [
            token_text(t) for t in config["additional_special_tokens"]]
    return template, variables


_compiled = {}


def render(env, case):
    template, variables = load(case.get("model_dir"), case.get("chat_template_file"))
    if template not in _compiled:  # transformers caches compiled templates too
        _compiled[template] = env.from_string(template)
    compiled = _compiled[template]
    return compiled.render(messages=case["messages"], tools=case.get("tools"), documents=None,
                           add_generation_prompt=case.get("add_generation_prompt", True),
                           **variables)


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("render")
    one.add_argument("model_dir")
    one.add_argument("messages")
    one.add_argument("--chat-template")
    one.add_argument("--no-generation-prompt", action="store_true")
    batch = sub.add_parser("batch")
    batch.add_argument("cases")
    args = parser.parse_args()
    env = environment()
    if args.command == "render":
        with open(args.messages, encoding="utf-8") as f:
            chat = json.load(f)
        if isinstance(chat, dict):
            case = {"messages": chat["messages"], "tools": chat.get("tools")}
        else:
            case = {"messages": chat}
        case.update(model_dir=args.model_dir, chat_template_file=args.chat_template,
                    add_generation_prompt=not args.no_generation_prompt)
        sys.stdout.write(render(env, case))
        return
    with open(args.cases, encoding="utf-8") as f:
        cases = json.load(f)
    results = []
    for case in cases:
        try:
            results.append({"text": render(env, case)})
        except Exception as error:  # raise_exception, or an operation jinja2 refuses
            results.append({"error": str(error), "kind": type(error).__name__})
    json.dump(results, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
