// `strata tokenize`: a tokenizer checked by hand. Reads UTF-8 text on stdin and prints its ids
// as one JSON array; with --decode, reads a JSON array of ids and prints their text. The
// tokenizer is "byte" or a model directory (tokenizer.json, vocab.json + merges.txt or
// tokenizer.model: docs/data.md). With --chat MESSAGES.json it prints the prompt the directory's
// chat template makes of a conversation instead (docs/models.md, "Chat templates"), so that a
// template can be checked by hand against transformers. Needs no config and no launcher.
#pragma once
#include <CLI/CLI.hpp>

namespace strata {

// Registers the `tokenize` subcommand on app, with a callback that runs it during parsing.
CLI::App* add_tokenize_command(CLI::App& app);

}  // namespace strata
