// The launcher: re-executing this command line under mpirun, here or on hosts, and the
// per-rank thread counts that keep N ranks on one machine from thrashing its cores.
#include "strata/dist/launcher.h"

#include <sched.h>
#include <unistd.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "strata/core/error.h"
#include "strata/kernels/cpu.h"

extern char** environ;

namespace strata {
namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// A positive integer from the environment, 0 when unset; a malformed value is a UserError.
int positive_env(const char* name) {
  const char* value = env(name);
  if (value == nullptr) return 0;
  char* end = nullptr;
  errno = 0;
  const long parsed = std::strtol(value, &end, 10);
  STRATA_REQUIRE(errno == 0 && *end == '\0' && parsed >= 1 && parsed <= 1 << 20, "$", name, "='",
                 value, "' must be a positive integer");
  return static_cast<int>(parsed);
}

// Open MPI's options that keep the ranks' TCP transport and its daemons' control channel on
// `iface` (an interface name or a CIDR subnet); none when it is empty.
std::vector<std::string> interface_options(const std::string& iface) {
  if (iface.empty()) return {};
  return {"--mca", "btl_tcp_if_include", iface, "--mca", "oob_tcp_if_include", iface};
}

}  // namespace

std::string mpirun_path() {
  const char* path = env("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate =
        (end > start ? dirs.substr(start, end - start) : std::string(".")) + "/mpirun";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "mpirun";
}

bool started_by_mpi_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"}) {
    if (env(name) != nullptr) return true;
  }
  return false;
}

int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    const char* value = env(name);
    if (value != nullptr) return std::atoi(value);
  }
  return -1;
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
}

int threads_per_rank(int cores, int local_ranks) {
  return std::max(1, cores / std::max(1, local_ranks));
}

std::string with_huge_page_malloc(const char* tunables) {
  const std::string given = tunables == nullptr ? "" : tunables;
  if (given.find("glibc.malloc.hugetlb=") != std::string::npos) return given;  // the user's
  return given.empty() ? kHugePageMalloc : given + ":" + kHugePageMalloc;
}

std::vector<std::string> mpirun_command(const LaunchTarget& target,
                                        const std::vector<std::string>& program_args) {
  return mpirun_command(target, program_args, available_cores(), geteuid() == 0);
}

std::vector<std::string> mpirun_command(const LaunchTarget& target,
                                        const std::vector<std::string>& program_args, int cores,
                                        bool as_root) {
  const int nproc = target.world();
  STRATA_REQUIRE(nproc >= 1, "--nproc (", nproc, ") must be at least 1");
  STRATA_REQUIRE(!program_args.empty(), "mpirun_command: no program to run");
  const bool on_hosts = !target.hosts.empty();
  STRATA_REQUIRE(!on_hosts || nproc <= total_slots(target.hosts), "--nproc ", nproc,
                 " is more ranks than the ", total_slots(target.hosts), " slots of the hosts (",
                 host_list(target.hosts), "): lower --nproc or give the hosts more slots");
  // The most ranks one machine runs: Open MPI fills each host's slots in turn.
  int local_ranks = nproc;
  if (on_hosts) {
    local_ranks = 0;
    for (const Host& host : target.hosts) local_ranks = std::max(local_ranks, host.slots);
    local_ranks = std::min(local_ranks, nproc);
  }
  const std::string threads = std::to_string(threads_per_rank(cores, local_ranks));
  std::vector<std::string> command = {mpirun_path(), "-np", std::to_string(nproc)};
  if (on_hosts) {
    command.push_back("--host");
    command.push_back(host_list(target.hosts));
  } else if (nproc > cores) {
    command.push_back("--oversubscribe");
  }
  if (as_root) command.push_back("--allow-run-as-root");
  if (local_ranks > cores) {
    // Ranks share cores: OpenMP threads that spin while they wait steal them from the others.
    command.push_back("-x");
    command.push_back("OMP_WAIT_POLICY=passive");
  }
  for (const char* variable : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "STRATA_THREADS"}) {
    command.push_back("-x");
    command.push_back(std::string(variable) + "=" + threads);
  }
  command.push_back("-x");
  command.push_back("GLIBC_TUNABLES=" + with_huge_page_malloc(std::getenv("GLIBC_TUNABLES")));
  // Passed by name, never by value (an API key stays out of every command line).
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string variable = *entry;
    const std::string name = variable.substr(0, variable.find('='));
    if (name == "STRATA_API_KEY" || (on_hosts && name.rfind("STRATA_", 0) == 0)) {
      command.push_back("-x");
      command.push_back(name);
    }
  }
  const std::vector<std::string> interface = interface_options(target.iface);
  command.insert(command.end(), interface.begin(), interface.end());
  if (on_hosts && std::getenv("OMPI_MCA_osc") == nullptr) {
    // Open MPI 4's osc/rdma takes windows over TCP and then fails to make them; without it
    // osc/pt2pt makes the census board (dist/mpi_internal.h) across hosts.
    command.insert(command.end(), {"--mca", "osc", "^rdma"});
  }
  command.insert(command.end(), program_args.begin(), program_args.end());
  return command;
}

std::vector<std::string> without_option(const std::vector<std::string>& args,
                                        const std::string& name) {
  std::vector<std::string> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == name) {
      ++i;  // and its value
    } else if (args[i].rfind(name + "=", 0) != 0) {
      kept.push_back(args[i]);
    }
  }
  return kept;
}

void exec_command(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
}

void relaunch_under_mpirun(int nproc, const std::vector<std::string>& program_args) {
  const std::vector<std::string> command = mpirun_command(LaunchTarget{nproc}, program_args);
  std::fflush(stdout);
  std::fflush(stderr);
  exec_command(command);
  throw UserError(str("could not start ", command[0], ": ", std::strerror(errno),
                      "; install Open MPI (openmpi-bin) or start strata under your MPI launcher"));
}

int configure_rank_threads(int threads) {
  int count = threads;
  if (count <= 0) count = positive_env("STRATA_THREADS");
  if (count <= 0) {
    int local_ranks = positive_env("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (local_ranks <= 0) local_ranks = positive_env("MPI_LOCALNRANKS");  // MPICH
    count = threads_per_rank(available_cores(), std::max(1, local_ranks));
  }
  at::set_num_threads(count);
  // OpenBLAS reads OPENBLAS_NUM_THREADS once, when it loads (before main), which is why the
  // launcher exports it. Started some other way, set it at run time if OpenBLAS is loaded.
  if (env("OPENBLAS_NUM_THREADS") == nullptr) {
    using SetThreads = void (*)(int);
    if (auto set = reinterpret_cast<SetThreads>(cpu_info().openblas_set_num_threads)) set(count);
  }
  return count;
}

}  // namespace strata
