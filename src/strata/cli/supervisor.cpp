// The supervisor: mpirun as a child whose stderr passes through this process (forwarded as
// it comes, and read for the first failure), a restart loop around it, and stop signals
// forwarded to it.
#include "strata/cli/supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "strata/ckpt/checkpoint.h"
#include "strata/core/error.h"
#include "strata/dist/launcher.h"
#include "strata/dist/mesh.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

// How long mpirun gets to end its ranks after a stop signal, or after a rank reported the job's
// failure, before it is ended: on hosts, the daemon of a host whose link is cut never answers
// mpirun's kill order, and mpirun would wait for it forever.
constexpr double kStopGraceS = 10.0;
// How long a host gets to start a daemon that reaches this machine back (elastic restarts).
constexpr double kHostProbeTimeoutS = 20.0;

volatile sig_atomic_t stop_signal = 0;
volatile pid_t running_job = 0;

void on_stop_signal(int signal) {
  stop_signal = signal;
  if (running_job > 0) kill(running_job, SIGTERM);  // mpirun ends its ranks
}

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: poll and sleeps return early
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

std::string prefix() { return "strata: supervisor: "; }

struct AttemptResult {
  int exit_code = 0;  // of mpirun; 128 + signal when a signal ended it
  FailureReport report;
};

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t written = write(fd, data, size);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;
    data += written;
    size -= static_cast<size_t>(written);
  }
}

[[noreturn]] void exec_job(const std::vector<std::string>& command, int stderr_fd) {
  dup2(stderr_fd, STDERR_FILENO);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  exec_command(command);
  std::fprintf(stderr, "strata: error: could not start %s: %s; install Open MPI (openmpi-bin)\n",
               command[0].c_str(), std::strerror(errno));
  std::_Exit(2);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// This process's children by /proc (their parent pid).
std::vector<pid_t> children() {
  std::vector<pid_t> found;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return found;
  const pid_t self = getpid();
  while (const dirent* entry = readdir(proc)) {
    const pid_t pid = std::atoi(entry->d_name);
    if (pid <= 0) continue;
    std::ifstream stat(str("/proc/", pid, "/stat"));
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    const size_t name_end = text.rfind(')');  // "pid (name) state ppid ..."
    if (name_end == std::string::npos) continue;
    std::istringstream rest(text.substr(name_end + 1));
    std::string state;
    pid_t parent = 0;
    if (rest >> state >> parent && parent == self) found.push_back(pid);
  }
  closedir(proc);
  return found;
}

// Ends what an attempt left behind. The supervisor is a child subreaper, so every process
// mpirun started here and orphaned (an rsh/ssh agent and the daemon of a host whose link was
// cut, which mpirun cannot reach to end; their ranks) becomes its child: killed and reaped, in
// rounds, since each one killed hands its own children over.
void end_leftovers() {
  for (int round = 0; round < 16; ++round) {
    const std::vector<pid_t> left = children();
    if (left.empty()) return;
    for (pid_t pid : left) kill(pid, SIGKILL);
    for (pid_t pid : left) {
      while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
}

AttemptResult run_attempt(const std::vector<std::string>& command) {
  int pipe_fds[2];
  STRATA_REQUIRE(pipe2(pipe_fds, O_CLOEXEC) == 0, "cannot create a pipe: ", std::strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  STRATA_REQUIRE(pid >= 0, "cannot fork mpirun: ", std::strerror(errno));
  if (pid == 0) exec_job(command, pipe_fds[1]);
  close(pipe_fds[1]);
  running_job = pid;
  if (stop_signal != 0) kill(pid, SIGTERM);  // a signal came before the pid was known

  AttemptResult result;
  std::string line;
  bool exited = false;
  int status = 0;
  Clock::time_point stop_seen{};  // a stop signal or the job's failure, first seen
  bool term_sent = false;
  for (bool open = true; open;) {
    pollfd entry{pipe_fds[0], POLLIN, 0};
    const int ready = poll(&entry, 1, 200);
    if (ready > 0) {
      char buffer[4096];
      const ssize_t count = read(pipe_fds[0], buffer, sizeof buffer);
      if (count > 0) {
        write_all(STDERR_FILENO, buffer, static_cast<size_t>(count));
        for (ssize_t i = 0; i < count; ++i) {
          if (buffer[i] != '\n') {
            line += buffer[i];
            continue;
          }
          read_failure_line(line, &result.report);
          line.clear();
        }
      } else if (count == 0 || errno != EINTR) {
        open = false;
      }
    }
    // mpirun gone but a straggler still holds the pipe: stop reading soon after.
    if (!exited && waitpid(pid, &status, WNOHANG) == pid) exited = true;
    if (exited && ready == 0) open = false;
    const bool failed = !result.report.what.empty() || result.report.aborted;
    if ((stop_signal != 0 || failed) && !exited) {
      if (stop_seen == Clock::time_point{}) stop_seen = Clock::now();
      const double waited = seconds_since(stop_seen);
      // After a stop signal (already sent on as SIGTERM) mpirun is killed; after a failure it
      // is asked to end first, then killed.
      if (waited > (stop_signal != 0 ? 1 : 2) * kStopGraceS) {
        kill(pid, SIGKILL);
      } else if (waited > kStopGraceS && !term_sent && stop_signal == 0) {
        std::cerr << prefix() << "mpirun has not ended the job " << kStopGraceS
                  << " s after it failed (a host that does not answer?): ending it" << std::endl;
        kill(pid, SIGTERM);
        term_sent = true;
      }
    }
  }
  if (!line.empty()) read_failure_line(line, &result.report);
  close(pipe_fds[0]);
  while (!exited && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  running_job = 0;
  end_leftovers();
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// The largest step metrics.jsonl records a loss for, or 0.
int64_t last_completed_step(const std::string& log_dir) {
  std::ifstream metrics(log_dir + "/metrics.jsonl");
  std::string line;
  int64_t last = 0;
  while (std::getline(metrics, line)) {
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.contains("loss") && record["step"].is_number_integer()) {
      last = std::max(last, record["step"].get<int64_t>());
    }
  }
  return last;
}

std::string ranks_on_hosts(const LaunchTarget& target) {
  const size_t hosts = target.hosts.size();
  return str(target.world(), " rank", target.world() == 1 ? "" : "s", " on ", hosts, " host",
             hosts == 1 ? "" : "s", " (", host_list(target.hosts), ")");
}

// The hosts of `candidates` missing from `answering`.
std::vector<Host> lost_hosts(const std::vector<Host>& candidates,
                             const std::vector<Host>& answering) {
  std::vector<Host> lost;
  for (const Host& host : candidates) {
    if (std::find(answering.begin(), answering.end(), host) == answering.end()) {
      lost.push_back(host);
    }
  }
  return lost;
}

// An elastic restart's hosts: those of `all` (with fault.elastic_grow) or of `current` that
// answer a probe. Returns false, having said why, when fewer than fault.min_hosts do.
bool elastic_hosts(const FaultConfig& fault, const std::vector<Host>& all, LaunchTarget* current) {
  const auto start = Clock::now();
  const std::vector<Host>& candidates = fault.elastic_grow ? all : current->hosts;
  const std::vector<Host> answering =
      reachable_hosts(candidates, current->iface, kHostProbeTimeoutS);
  const std::vector<Host> lost = lost_hosts(candidates, answering);
  std::cerr << prefix() << "elastic: " << answering.size() << " of " << candidates.size()
            << " hosts answer (" << host_names(answering) << ")"
            << (lost.empty() ? "" : "; lost " + host_names(lost)) << "; probed in " << std::fixed
            << std::setprecision(1) << seconds_since(start) << " s" << std::defaultfloat
            << std::endl;
  if (static_cast<int64_t>(answering.size()) < fault.min_hosts) {
    std::cerr << prefix() << "giving up: " << answering.size() << " host"
              << (answering.size() == 1 ? " answers" : "s answer")
              << ", fewer than fault.min_hosts = " << fault.min_hosts << std::endl;
    return false;
  }
  current->hosts = answering;
  return true;
}

void sleep_unless_stopped(double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (stop_signal == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

void read_failure_line(const std::string& line, FailureReport* report) {
  static const std::regex signal_report(
      R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)( \(([^)]*)\))?)");
  static const std::regex rank_message(R"(^strata: (error: )?rank (\d+): (.*)$)");
  static const std::regex user_error(R"(^strata: error: (.*)$)");
  std::smatch match;
  if (line.find("MPI_ABORT was invoked") != std::string::npos) report->aborted = true;
  if (!report->aborted && std::regex_search(line, match, signal_report)) {
    report->rank = std::stoi(match[1]);
    report->what = str("killed by signal ", match[2].str(),
                       match[4].matched ? " (" + match[4].str() + ")" : "");
    report->user_error = false;
    return;
  }
  if (!report->what.empty()) return;  // the first failure wins
  if (std::regex_search(line, match, rank_message)) {
    report->rank = std::stoi(match[2]);
    report->what = match[3];
    report->user_error = match[1].matched;
  } else if (std::regex_search(line, match, user_error)) {
    report->what = match[1];
    report->user_error = true;
  }
}

int supervise_training(const Config& validated, const LaunchTarget& target,
                       const std::vector<std::string>& program_args) {
  install_stop_handlers();
  prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphans of an attempt come back here (end_leftovers)
  const FaultConfig& fault = validated.fault;
  const std::string& checkpoint_root = validated.checkpoint.dir;
  std::vector<std::string> args = program_args;
  LaunchTarget current = target;
  bool replanned = validated.parallel.auto_layout;
  for (int attempt = 0;; ++attempt) {
    if (!current.hosts.empty()) {
      std::cerr << prefix() << "starting " << ranks_on_hosts(current) << std::endl;
    }
    // Set here, before the command is made: on hosts, mpirun passes it on by name.
    setenv("STRATA_ATTEMPT", std::to_string(attempt).c_str(), 1);
    const AttemptResult result = run_attempt(mpirun_command(current, args));
    if (stop_signal != 0) {
      std::cerr << prefix() << "stopped by " << (stop_signal == SIGINT ? "SIGINT" : "SIGTERM")
                << "; every rank has ended" << std::endl;
      return 128 + stop_signal;
    }
    if (result.exit_code == 0) return 0;
    const FailureReport& report = result.report;
    if (report.user_error) return 2;  // the ranks printed it; a restart would fail alike

    std::string what = report.what.empty() ? "no rank said why" : report.what;
    if (report.rank >= 0) what = str("rank ", report.rank, ": ", what);
    std::cerr << prefix() << "the job failed (mpirun exit code " << result.exit_code
              << "): " << what << "; last completed step " << last_completed_step(validated.log.dir)
              << std::endl;
    if (attempt >= fault.max_restarts) {
      std::cerr << prefix() << "giving up after " << attempt << " restart"
                << (attempt == 1 ? "" : "s") << " (fault.max_restarts = " << fault.max_restarts
                << ")" << std::endl;
      return result.exit_code;
    }
    const std::string checkpoint =
        checkpoint_root.empty() ? "" : find_latest_checkpoint(checkpoint_root);
    std::cerr << prefix() << "restart " << attempt + 1 << " of " << fault.max_restarts << " in "
              << fault.restart_backoff_s << " s, from "
              << (checkpoint.empty() ? std::string("step 0 (no checkpoint yet)")
                                     : "checkpoint " + checkpoint)
              << std::endl;
    sleep_unless_stopped(fault.restart_backoff_s);
    if (stop_signal != 0) return 128 + stop_signal;
    if (fault.elastic && !current.hosts.empty()) {
      const LaunchTarget before = current;
      if (!elastic_hosts(fault, target.hosts, &current)) return result.exit_code;
      current.nproc = std::min(target.world(), total_slots(current.hosts));
      if (current.world() != before.world() && !replanned) {
        // The planner chooses the layout for the new rank count, on the ranks (the same
        // choice on every rank, printed by rank 0); the global batch stays.
        std::cerr << prefix() << "elastic: layout " << to_string(mesh_shape_of(validated.parallel))
                  << " on " << before.world() << " ranks; the next is the planner's for "
                  << current.world() << " (parallel.auto), train.global_batch "
                  << validated.train.global_batch << " kept" << std::endl;
        args.push_back("--set");
        args.push_back("parallel.auto=true");
        replanned = true;
      } else if (current.world() != before.world()) {
        std::cerr << prefix() << "elastic: " << before.world() << " ranks, now " << current.world()
                  << "; the planner chooses the layout (parallel.auto)" << std::endl;
      }
    }
    if (attempt == 0 && !checkpoint_root.empty()) {
      args.push_back("--set");
      args.push_back("checkpoint.resume=auto");
    }
  }
}

}  // namespace strata
