// `strata env`: what a bug report needs about this binary and this machine: the strata
// commit, libtorch, the MPI library, the BLAS, the CPU and its features, the vector path the
// kernels run (and STRATA_CPU_PATH if set), and which kernel typical products take. Needs no
// config and no launcher.
#pragma once
#include <CLI/CLI.hpp>

namespace strata {

// Registers the `env` subcommand on app (--json for JSON), with a callback that runs it during
// parsing.
CLI::App* add_env_command(CLI::App& app);

}  // namespace strata
