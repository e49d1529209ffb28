// `strata simulate`: builds a pipeline schedule, checks it, runs it on a cost model and prints
// step time, bubble fraction and peak in-flight activations per stage (text or JSON), and can
// draw the timeline as SVG. Needs no model, no MPI, no data.
#pragma once
#include <CLI/CLI.hpp>

namespace strata {

// Registers the `simulate` subcommand on app, with a callback that runs it during parsing.
// Bad input prints "strata: error: ..." naming the flag and what would work, and makes
// CLI11_PARSE return 2 (the callback throws CLI::RuntimeError(2)).
CLI::App* add_simulate_command(CLI::App& app);

}  // namespace strata
