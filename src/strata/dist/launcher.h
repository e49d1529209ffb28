// The launcher: `strata train --nproc N` re-executes the same command line under
// mpirun with N ranks (adding --oversubscribe when N exceeds the cores, and the
// allow-run-as-root switches when running as root), or with --hosts/--hostfile on those
// hosts through the agent Open MPI is configured with (ssh by default), giving each rank
// max(1, cores / N) intra-op threads for ATen and OpenBLAS (OMP_NUM_THREADS,
// OPENBLAS_NUM_THREADS, STRATA_THREADS), and OMP_WAIT_POLICY=passive when ranks outnumber cores
// (spinning OpenMP threads would steal the cores of other ranks). Started by mpirun/srun
// directly, nothing is relaunched.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "strata/dist/hosts.h"

namespace strata {

// Where a job's ranks run: nproc ranks on this machine, or ranks on hosts.
struct LaunchTarget {
  explicit LaunchTarget(int nproc = 0, std::vector<Host> hosts = {}, std::string iface = {})
      : nproc(nproc), hosts(std::move(hosts)), iface(std::move(iface)) {}

  int nproc = 0;            // ranks; with hosts, 0 = one per slot
  std::vector<Host> hosts;  // empty: this machine
  std::string iface;  // with hosts: the interface or subnet (10.0.0.0/24) for ranks and daemons

  // The ranks it starts: nproc, or with hosts and nproc 0 every slot.
  int world() const { return hosts.empty() || nproc > 0 ? nproc : total_slots(hosts); }
};

// The mpirun on $PATH, else plain "mpirun" (execvp then reports it missing).
std::string mpirun_path();

// True when this process was started by an MPI launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
// PMIX_RANK or SLURM_PROCID in the environment).
bool started_by_mpi_launcher();

// This process's world rank as the MPI launcher set it in the environment (Open MPI, PMI,
// Slurm), before MPI starts; -1 when not started by one.
int launcher_rank();

// Number of cores this process may use (sched_getaffinity), at least 1.
int available_cores();

// Intra-op threads per rank: max(1, cores / local_ranks).
int threads_per_rank(int cores, int local_ranks);

// glibc's tunable that puts malloc's large blocks on transparent huge pages. Open MPI's
// reductions (all-reduce, reduce-scatter) and ATen take fresh buffers of megabytes on every
// call, above malloc's mmap threshold, so each call first-touches them page by page; on 4 KiB
// pages that cost 3-5 s per GiB on the VMs measured (a 32 MB reduce-scatter of 2 ranks took
// 163 ms, 8 ms on huge pages) and made ZeRO-2/3 steps 1.3-1.6x ZeRO-0's (docs/parallelism.md).
inline constexpr const char* kHugePageMalloc = "glibc.malloc.hugetlb=1";
// GLIBC_TUNABLES for the ranks: `tunables` (the launcher's own, may be null) with
// kHugePageMalloc added, unless it already sets glibc.malloc.hugetlb (the user's choice).
std::string with_huge_page_malloc(const char* tunables);

// The argv (argv[0] = mpirun path) that runs `program_args` on target.nproc local ranks:
//   mpirun -np N [--oversubscribe] [--allow-run-as-root] -x OMP_NUM_THREADS=t
//          -x OPENBLAS_NUM_THREADS=t -x STRATA_THREADS=t -x GLIBC_TUNABLES=...
//          <program_args...>
// with t = threads_per_rank(cores, N), GLIBC_TUNABLES = with_huge_page_malloc(the launcher's),
// --oversubscribe when N > cores and
// --allow-run-as-root when the effective user is root, and `-x STRATA_API_KEY` (the name only:
// the value stays out of every command line) when that variable is set. Throws UserError if
// nproc < 1.
// With hosts: `-np W --host a:2,b:2` instead of --oversubscribe (W = target.world(), at most
// their slots), threads per rank from this machine's cores and the most ranks one host runs,
// with iface Open MPI's btl_tcp_if_include and oob_tcp_if_include (the ranks' TCP and its
// daemons' control channel on that interface or subnet), `--mca osc ^rdma` (unless $OMPI_MCA_osc is
// set: osc/rdma cannot make windows over TCP, the census board's), and every STRATA_* variable of
// this environment passed on by name (ranks on other hosts get only what mpirun forwards).
std::vector<std::string> mpirun_command(const LaunchTarget& target,
                                        const std::vector<std::string>& program_args);
// The same for a given core count and user (for tests and dry runs).
std::vector<std::string> mpirun_command(const LaunchTarget& target,
                                        const std::vector<std::string>& program_args, int cores,
                                        bool as_root);

// `args` without the option `name` and its value (`name VALUE` or `name=VALUE`).
std::vector<std::string> without_option(const std::vector<std::string>& args,
                                        const std::string& name);

// execvp of command[0] with `command` as its argv; returns only when it could not start.
void exec_command(const std::vector<std::string>& command);

// Replaces this process with mpirun running program_args (execvp); returns only by throwing
// UserError if mpirun cannot be started.
[[noreturn]] void relaunch_under_mpirun(int nproc, const std::vector<std::string>& program_args);

// Sets ATen's and OpenBLAS's thread counts for this rank: `threads` if > 0, else
// $STRATA_THREADS, else max(1, cores / local ranks on this node), the local ranks read from
// $OMPI_COMM_WORLD_LOCAL_SIZE (or MPICH's $MPI_LOCALNRANKS), 1 when absent. Returns the count
// used. OpenBLAS fixes its pool when it loads, from $OPENBLAS_NUM_THREADS: the launcher
// exports it; when it is absent, openblas_set_num_threads is called if OpenBLAS is loaded.
int configure_rank_threads(int threads);

}  // namespace strata
