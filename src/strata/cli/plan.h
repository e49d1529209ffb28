// `strata plan`: predicts memory, step time and throughput of a model on a cluster for one
// layout, or searches every layout and ranks those that fit; `strata plan calibrate` measures
// this machine and writes the `local` cluster profile. Needs no data; only calibrate uses MPI.
#pragma once
#include <CLI/CLI.hpp>

namespace strata {

// Registers the `plan` subcommand (and its `calibrate` subcommand) on app, with callbacks that
// run during parsing. Bad input prints "strata: error: ..." naming the flag or file and what
// would work, and makes CLI11_PARSE return 2 (the callback throws CLI::RuntimeError(2)).
CLI::App* add_plan_command(CLI::App& app);

}  // namespace strata
