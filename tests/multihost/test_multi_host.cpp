// Several hosts on one machine (scripts/netns-cluster.sh: network namespaces joined by a bridge,
// a hostname each, ranks on different hosts talk only over TCP), driven as a user drives them:
// `strata train --hosts ...`. Two hosts give the losses of one; a host lost mid-run (its link
// cut and its processes killed, as a power failure would) or only cut off is survived by an
// elastic restart onto the hosts left, in a layout the planner chose for them, resuming from the
// newest complete checkpoint: every step is recorded once, every sample of every step is trained
// exactly once, and the steps after the restart equal a run started fresh from that checkpoint
// in the new layout. Needs root and `ip netns`: where they are missing each test says so and is
// skipped (CI runs as root).
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "strata/ckpt/checkpoint_index.h"
#include "strata/core/error.h"
#include "strata/data/sampler.h"
#include "strata/dist/hosts.h"
#include "test_configs.h"
#include "test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
const std::string kStrata = STRATA_BINARY;
const std::string kCluster = std::string(STRATA_SOURCE_DIR) + "/scripts/netns-cluster.sh";

// The hosts h1..hN for one test (the namespaces are global: one cluster at a time), removed by
// the destructor whatever happened.
class Cluster {
 public:
  Cluster(int hosts, const testing::TempDir& dir) : dir_(dir.file("hosts")) {
    std::string output;
    up_ =
        testing::run_command(
            "SLOTS=1 bash " + kCluster + " up " + std::to_string(hosts) + " " + dir_, &output) == 0;
    EXPECT_TRUE(up_) << output;
  }
  ~Cluster() { testing::run_command("bash " + kCluster + " down " + dir_); }
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  bool up() const { return up_; }
  // What a command needs to run strata across these hosts: Open MPI's agent and interfaces.
  std::string env() const { return ". " + dir_ + "/env &&"; }
  void act(const std::string& action, const std::string& host) const {
    std::string output;
    EXPECT_EQ(
        testing::run_command("bash " + kCluster + " " + action + " " + host + " " + dir_, &output),
        0)
        << output;
  }
  // The pid of a process on `host` stopped by SIGSTOP (fault injection), or 0.
  int stopped_process(const std::string& host) const {
    std::string pids;
    testing::run_command("ip netns pids strata-" + host, &pids);
    std::istringstream list(pids);
    for (int pid; list >> pid;) {
      std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
      std::string text((std::istreambuf_iterator<char>(stat)), {});
      const size_t state = text.rfind(')');
      if (state != std::string::npos && text.compare(state, 3, ") T") == 0) return pid;
    }
    return 0;
  }

 private:
  std::string dir_;
  bool up_ = false;
};

// Why these tests cannot run here, or "" when they can.
std::string cannot_run() {
  std::string output;
  return testing::run_command("bash " + kCluster + " check", &output) == 0 ? "" : output;
}

#define SKIP_WITHOUT_NAMESPACES()                           \
  if (const std::string why = cannot_run(); !why.empty()) { \
    GTEST_SKIP() << why;                                    \
  }

// 10 steps of global batch 12 (divisible by 1, 2, 3 and 4 ranks) in micro batches of 1, a
// checkpoint every 2 steps, every rank's samples logged.
std::string write_config(const testing::TempDir& dir, const std::string& name) {
  const std::string path = dir.file(name + ".toml");
  std::string run = testing::tiny_run_toml(10);
  const std::string batch = "global_batch = 4\nmicro_batch = 2\n";
  EXPECT_NE(run.find(batch), std::string::npos) << run;
  run.replace(run.find(batch), batch.size(), "global_batch = 12\nmicro_batch = 1\n");
  std::ofstream(path) << run
                      << R"(
[parallel]
comm_timeout_s = 8.0
[data]
source = "synthetic"
[checkpoint]
every = 2
keep = 0
dir = ")" + dir.file(name + "/ckpt") +
                             R"("
[fault]
restart_backoff_s = 0.0
[log]
samples = true
progress = "lines"
dir = ")" + dir.file(name + "/log") +
                             "\"\n";
  return path;
}

struct TrainRun {
  int exit_code = 0;
  std::string output;
};

TrainRun train(const std::string& config, const std::string& args, const std::string& env = "") {
  TrainRun run;
  run.exit_code =
      testing::run_command(env + " " + kStrata + " train " + config + " " + args, &run.output);
  return run;
}

// The losses of metrics.jsonl in step order; every step first..n must appear exactly once.
std::vector<double> losses(const std::string& log_dir, int64_t first = 1) {
  std::ifstream file(log_dir + "/metrics.jsonl");
  std::vector<double> result;
  std::string line;
  while (std::getline(file, line)) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (!record.contains("loss")) continue;
    EXPECT_EQ(record["step"].get<int64_t>(), static_cast<int64_t>(result.size()) + first) << line;
    result.push_back(record["loss"].get<double>());
  }
  return result;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double rel,
                 size_t from, const std::string& context) {
  ASSERT_EQ(got.size(), want.size()) << context;
  for (size_t i = from; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rel * std::abs(want[i])) << "step " << i + 1 << "\n" << context;
  }
}

void expect_contains(const std::string& output, const std::string& part) {
  EXPECT_NE(output.find(part), std::string::npos) << "'" << part << "' not in:\n" << output;
}

// Every (step, row) trained, from the sample logs of all ranks and attempts: a step's rows
// count from the attempt that recorded the step last (an attempt that died replays its steps
// after the checkpoint in the next one). Maps step -> row -> the hash of its tokens.
std::map<int64_t, std::map<int64_t, std::string>> trained_samples(const std::string& log_dir) {
  std::map<int64_t, int64_t> last_attempt;  // step -> attempt
  std::vector<nlohmann::json> records;
  for (const auto& entry : fs::directory_iterator(log_dir)) {
    if (entry.path().filename().string().rfind("samples_rank_", 0) != 0) continue;
    std::ifstream file(entry.path());
    for (std::string line; std::getline(file, line);) {
      records.push_back(nlohmann::json::parse(line));
      const int64_t step = records.back()["step"], attempt = records.back()["attempt"];
      last_attempt[step] = std::max(last_attempt[step], attempt);
    }
  }
  std::map<int64_t, std::map<int64_t, std::string>> trained;
  for (const nlohmann::json& record : records) {
    const int64_t step = record["step"];
    if (record["attempt"] != last_attempt[step]) continue;
    for (const auto& row : record["rows"]) {
      const auto [it, fresh] =
          trained[step].emplace(row[0].get<int64_t>(), row[1].get<std::string>());
      EXPECT_TRUE(fresh) << "step " << step << " row " << row[0] << " trained twice";
    }
  }
  return trained;
}

void expect_every_sample_once(const std::string& log_dir, const std::string& reference_log_dir) {
  const auto trained = trained_samples(log_dir);
  const auto reference = trained_samples(reference_log_dir);
  ASSERT_EQ(reference.size(), 10u);
  EXPECT_EQ(trained, reference) << "the samples trained differ from an uninterrupted run's";
  for (const auto& [step, rows] : reference) EXPECT_EQ(rows.size(), 12u) << "step " << step;
}

// "resumed from step N of DIR": the step an attempt resumed from (the last such line).
int64_t resumed_step(const std::string& output) {
  static const std::regex resumed(R"(resumed from step (\d+))");
  int64_t step = -1;
  for (std::sregex_iterator it(output.begin(), output.end(), resumed), end; it != end; ++it) {
    step = std::stoll((*it)[1]);
  }
  return step;
}

// The hosts and slots Open MPI maps `hostfile` to, without starting anything (--do-not-launch;
// the hosts need not exist), in the order it lists them; empty when it refuses the file.
std::vector<Host> open_mpi_hosts(const std::string& hostfile, int ranks) {
  std::string output;
  testing::run_command("mpirun --allow-run-as-root --hostfile " + hostfile +
                           " --display-map --do-not-launch -np " + std::to_string(ranks) + " true",
                       &output);
  static const std::regex node(R"(Data for node: (\S+)\s+Num slots: (\d+))");
  std::vector<Host> hosts;
  for (std::sregex_iterator it(output.begin(), output.end(), node), end; it != end; ++it) {
    hosts.push_back({(*it)[1], std::stoi((*it)[2])});
  }
  return hosts;
}

// strata launches with --host from its own reading of a hostfile: that reading must be Open
// MPI's, for every file strata accepts, and strata refuses what Open MPI refuses.
TEST(MultiHost, HostfilesReadAsOpenMpiReadsThem) {
  testing::TempDir dir;
  const std::string path = dir.file("hosts");
  for (const std::string accepted :
       {"a slots=2\n", "# cluster\na slots=2 max_slots=4  # big\n\nb max_slots=3\nc cpu=1\n",
        "a\na\na\nb count=2\n", "b slots=1\na\na\n"}) {
    testing::write_bytes(path, accepted);
    const std::vector<Host> ours = read_hostfile(path);
    EXPECT_EQ(open_mpi_hosts(path, total_slots(ours)), ours) << accepted;
  }
  for (const std::string refused : {"a slots=2\na slots=2\n", "a slots=3 max_slots=2\n",
                                    "a\na slots=2\n", "a slots=x\n", "a cores=2\n"}) {
    testing::write_bytes(path, refused);
    EXPECT_THROW(read_hostfile(path), UserError) << refused;
    EXPECT_TRUE(open_mpi_hosts(path, 1).empty()) << refused;
  }
}

TEST(MultiHost, TwoHostsOverTcpGiveTheLossesOfOne) {
  SKIP_WITHOUT_NAMESPACES();
  testing::TempDir dir;
  Cluster cluster(2, dir);
  ASSERT_TRUE(cluster.up());
  // dp 2 x tp 2, the tp pairs inside a host (ranks fill a host's slots first).
  const std::string layout = "--set parallel.tp=2 --set log.samples=false";
  const TrainRun one = train(write_config(dir, "one"), "--nproc 4 " + layout);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const TrainRun two =
      train(write_config(dir, "two"), "--hosts h1:2,h2:2 " + layout, cluster.env());
  ASSERT_EQ(two.exit_code, 0) << two.output;
  expect_contains(two.output, "4 ranks on 2 hosts (h1:2,h2:2)");
  expect_near(losses(dir.file("two/log")), losses(dir.file("one/log")), 1e-6, 0, two.output);
}

// How a test loses a host, and what it expects.
struct HostLoss {
  std::string faults = "STOP step 5 2";  // STRATA_INJECT_FAULT: rank 2 runs on h3
  std::string options;                   // more `strata train` options
  bool cut_only = false;  // h3's link cut, its processes left running (else killed too)
  bool grow = false;      // fault.elastic_grow: h3 mended, then rank 0 of the second attempt lost
  int64_t resumed = 4;    // the step the last attempt resumes from
};

// Waits (at most 240 s) for a process on `host` to be stopped by fault injection; its pid.
int wait_for_stopped(const Cluster& cluster, const std::string& host) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  int pid = 0;
  while ((pid = cluster.stopped_process(host)) == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(pid, 0) << "no process on " << host << " was stopped";
  return pid;
}

// A host lost mid-step: its rank stopped by fault injection (the others wait in a collective),
// then its link cut and every process on it killed, as a power failure would; `cut_only`
// leaves them running, cut off. Either way the job goes on on h1 and h2. With `grow`, h3 comes
// back, rank 0 is lost in the second attempt, and the third runs on all three hosts again.
void lose_a_host_and_go_on(const HostLoss& loss) {
  testing::TempDir dir;
  Cluster cluster(3, dir);
  ASSERT_TRUE(cluster.up());
  const std::string config = write_config(dir, "elastic");
  TrainRun run;
  std::thread job([&] {
    run = train(config,
                "--hosts h1:1,h2:1,h3:1 --set fault.elastic=true --set fault.min_hosts=2 " +
                    std::string(loss.grow ? "--set fault.elastic_grow=true " : "") + loss.options,
                cluster.env() + " STRATA_INJECT_FAULT='" + loss.faults + "'");
  });
  wait_for_stopped(cluster, "h3");
  cluster.act("cut", "h3");
  if (!loss.cut_only) cluster.act("kill", "h3");
  if (loss.grow) {
    const int rank0 = wait_for_stopped(cluster, "h1");
    cluster.act("mend", "h3");
    if (rank0 != 0) kill(rank0, SIGKILL);
  }
  job.join();
  ASSERT_EQ(run.exit_code, 0) << run.output;
  expect_contains(run.output, "lost h3");
  expect_contains(run.output, "2 ranks on 2 hosts (h1:1,h2:1)");
  expect_contains(run.output, "parallel.auto");
  if (loss.cut_only) {  // the others time out; the census names the host that does not answer
    expect_contains(run.output, "ranks [2] on h3 did not answer the census");
  }
  const std::string last_hosts = loss.grow ? "h1:1,h2:1,h3:1" : "h1:1,h2:1";
  if (loss.grow) {
    expect_contains(run.output, "3 of 3 hosts answer");
    expect_contains(run.output, "3 ranks on 3 hosts (" + last_hosts + ")");
  }
  ASSERT_EQ(resumed_step(run.output), loss.resumed) << run.output;

  // The same 10 steps, each once, every sample of each trained once.
  const TrainRun whole = train(write_config(dir, "whole"), "--nproc 1");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::vector<double> got = losses(dir.file("elastic/log"));
  expect_every_sample_once(dir.file("elastic/log"), dir.file("whole/log"));

  // The steps after the last restart: those of a run started fresh from the same checkpoint in
  // the layout the planner chose for the hosts of that attempt.
  const TrainRun fresh = train(
      write_config(dir, "fresh"),
      "--hosts " + last_hosts + " --set parallel.auto=true " + loss.options +
          " --set checkpoint.resume=" + dir.file("elastic/ckpt/" + step_dir_name(loss.resumed)),
      cluster.env());
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  const std::vector<double> after = losses(dir.file("fresh/log"), loss.resumed + 1);
  ASSERT_EQ(after.size(), static_cast<size_t>(10 - loss.resumed)) << fresh.output;
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_NEAR(got.at(loss.resumed + i), after[i], 1e-6 * std::abs(after[i]))
        << "step " << loss.resumed + 1 + i;
  }
  // And all of it follows the single rank's run up to the rounding of other reduction orders.
  expect_near(got, losses(dir.file("whole/log")), 1e-5, 0, run.output);
}

TEST(MultiHost, LostHostIsSurvivedOnTheHostsLeft) {
  SKIP_WITHOUT_NAMESPACES();
  lose_a_host_and_go_on(HostLoss());
}

TEST(MultiHost, CutLinkIsSurvivedOnTheHostsLeft) {
  SKIP_WITHOUT_NAMESPACES();
  HostLoss loss;
  loss.cut_only = true;
  lose_a_host_and_go_on(loss);
}

// The host dies while its asynchronous write of step 6 is in flight (its file written, the
// commit not made): step 6 never becomes the newest complete checkpoint; the job resumes from 4.
TEST(MultiHost, AsyncCheckpointInFlightOnALostHostIsNotResumedFrom) {
  SKIP_WITHOUT_NAMESPACES();
  HostLoss loss;
  loss.faults = "STOP async_write 6 2";
  loss.options = "--set checkpoint.async=true";
  lose_a_host_and_go_on(loss);
}

// fault.elastic_grow: h3, lost and shrunk away from, answers again at the next restart and is
// taken back; the third attempt runs on three hosts from step 8.
TEST(MultiHost, HostThatComesBackIsReadmitted) {
  SKIP_WITHOUT_NAMESPACES();
  HostLoss loss;
  loss.faults = "STOP step 5 2, STOP step 8 0 1";
  loss.grow = true;
  loss.resumed = 8;
  lose_a_host_and_go_on(loss);
}

}  // namespace
}  // namespace strata
