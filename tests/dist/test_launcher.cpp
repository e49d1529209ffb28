// The launcher's command line, thread arithmetic and environment handling (no mpirun is
// started: the relaunch test points PATH at an empty directory).
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include "expect_error.h"
#include "strata/core/error.h"
#include "strata/dist/hosts.h"
#include "strata/dist/launcher.h"
#include "test_support.h"

namespace strata {
namespace {

using testing::ScopedEnv;

std::string joined(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& word : words) text += word + " ";
  return text;
}

TEST(Launcher, ThreadsPerRank) {
  EXPECT_EQ(threads_per_rank(8, 1), 8);
  EXPECT_EQ(threads_per_rank(8, 2), 4);
  EXPECT_EQ(threads_per_rank(8, 3), 2);
  EXPECT_EQ(threads_per_rank(8, 8), 1);
  EXPECT_EQ(threads_per_rank(8, 16), 1);
  EXPECT_EQ(threads_per_rank(1, 4), 1);
  EXPECT_EQ(threads_per_rank(16, 0), 16);  // no local ranks known: one
  EXPECT_GE(available_cores(), 1);
}

TEST(Launcher, CommandForFewerRanksThanCores) {
  ScopedEnv tunables("GLIBC_TUNABLES", nullptr);
  const auto command =
      mpirun_command(LaunchTarget{4}, {"strata", "train", "--config", "a.toml"}, 8, false);
  ASSERT_FALSE(command.empty());
  EXPECT_NE(command[0].find("mpirun"), std::string::npos);
  const std::vector<std::string> rest(command.begin() + 1, command.end());
  EXPECT_EQ(rest, (std::vector<std::string>{"-np", "4", "-x", "OMP_NUM_THREADS=2", "-x",
                                            "OPENBLAS_NUM_THREADS=2", "-x", "STRATA_THREADS=2",
                                            "-x", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1", "strata",
                                            "train", "--config", "a.toml"}));
}

TEST(Launcher, CommandOversubscribedAsRoot) {
  ScopedEnv tunables("GLIBC_TUNABLES", nullptr);
  const auto command = mpirun_command(LaunchTarget{5}, {"strata"}, 2, true);
  const std::vector<std::string> rest(command.begin() + 1, command.end());
  EXPECT_EQ(rest,
            (std::vector<std::string>{"-np", "5", "--oversubscribe", "--allow-run-as-root", "-x",
                                      "OMP_WAIT_POLICY=passive", "-x", "OMP_NUM_THREADS=1", "-x",
                                      "OPENBLAS_NUM_THREADS=1", "-x", "STRATA_THREADS=1", "-x",
                                      "GLIBC_TUNABLES=glibc.malloc.hugetlb=1", "strata"}));
  // Exactly as many ranks as cores is not oversubscribed.
  const auto exact = mpirun_command(LaunchTarget{2}, {"strata"}, 2, false);
  EXPECT_EQ(std::count(exact.begin(), exact.end(), "--oversubscribe"), 0);
}

TEST(Launcher, RanksMallocOnHugePagesKeepingTheUsersTunables) {
  EXPECT_EQ(with_huge_page_malloc(nullptr), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(with_huge_page_malloc(""), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(with_huge_page_malloc("glibc.malloc.arena_max=2"),
            "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1");
  EXPECT_EQ(with_huge_page_malloc("glibc.malloc.hugetlb=0"), "glibc.malloc.hugetlb=0");
  ScopedEnv tunables("GLIBC_TUNABLES", "glibc.malloc.arena_max=2");
  const auto command = mpirun_command(LaunchTarget{2}, {"strata"}, 2, false);
  EXPECT_EQ(std::count(command.begin(), command.end(),
                       "GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"),
            1);
}

TEST(Launcher, ForwardsTheApiKeyByNameOnly) {
  ScopedEnv key("STRATA_API_KEY", "secret-key");
  const auto command = mpirun_command(LaunchTarget{2}, {"strata", "serve"}, 2, false);
  EXPECT_EQ(std::count(command.begin(), command.end(), "STRATA_API_KEY"), 1);
  for (const auto& arg : command) EXPECT_EQ(arg.find("secret-key"), std::string::npos) << arg;
}

TEST(Launcher, CommandOnHosts) {
  ScopedEnv tunables("GLIBC_TUNABLES", nullptr);
  ScopedEnv attempt("STRATA_ATTEMPT", "1");
  ScopedEnv osc("OMPI_MCA_osc", nullptr);
  LaunchTarget target{0, {{"h1", 2}, {"h2", 2}}, "10.0.0.0/24"};
  EXPECT_EQ(target.world(), 4);
  const auto command = mpirun_command(target, {"/opt/strata", "train"}, 4, false);
  const std::vector<std::string> rest(command.begin() + 1, command.end());
  // Two ranks a host on four cores: two threads each; the hosts' slots, no oversubscription;
  // this environment's STRATA_ variables forwarded by name; TCP and daemons on the subnet.
  const std::vector<std::string> head = {"-np",       "4",  "--host",
                                         "h1:2,h2:2", "-x", "OMP_NUM_THREADS=2"};
  EXPECT_TRUE(std::equal(head.begin(), head.end(), rest.begin())) << joined(rest);
  EXPECT_EQ(std::count(rest.begin(), rest.end(), "STRATA_ATTEMPT"), 1);
  const std::vector<std::string> tail = {"--mca",
                                         "btl_tcp_if_include",
                                         "10.0.0.0/24",
                                         "--mca",
                                         "oob_tcp_if_include",
                                         "10.0.0.0/24",
                                         "--mca",
                                         "osc",
                                         "^rdma",
                                         "/opt/strata",
                                         "train"};
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), rest.end() - tail.size())) << joined(rest);
  EXPECT_EQ(std::count(rest.begin(), rest.end(), "--oversubscribe"), 0);

  target.nproc = 3;  // fewer ranks than slots
  EXPECT_EQ(mpirun_command(target, {"strata"}, 4, false)[2], "3");
  target.nproc = 5;
  EXPECT_EQ(testing::user_error([&] { mpirun_command(target, {"strata"}, 4, false); }),
            "--nproc 5 is more ranks than the 4 slots of the hosts (h1:2,h2:2): lower --nproc or "
            "give the hosts more slots");
}

TEST(Hosts, ParsesHostListsAndHostfiles) {
  EXPECT_EQ(parse_hosts("a:2,b:2,c", "--hosts"), (std::vector<Host>{{"a", 2}, {"b", 2}, {"c", 1}}));
  EXPECT_EQ(parse_hosts("a,a:3", "--hosts"), (std::vector<Host>{{"a", 4}}));
  EXPECT_EQ(host_list({{"a", 2}, {"b", 1}}), "a:2,b:1");
  EXPECT_EQ(host_names({{"a", 2}, {"b", 1}}), "a, b");
  EXPECT_EQ(total_slots({{"a", 2}, {"b", 1}}), 3);
  EXPECT_EQ(testing::user_error([] { parse_hosts("a:0", "--hosts"); }),
            "--hosts: slots '0' must be a positive integer");
  EXPECT_EQ(testing::user_error([] { parse_hosts("a b", "--hosts"); }),
            "--hosts a b: 'a b' is not NAME or NAME:SLOTS");
  EXPECT_CONTAINS(testing::user_error([] { parse_hosts("", "--hosts"); }), "names no host");

  testing::TempDir dir;
  const std::string path = dir.file("hosts");
  testing::write_bytes(path,
                       "# the cluster\nnode1 slots=8\n\nnode2 slots=4 max_slots=8  # two\nnode3\n"
                       "node4 max_slots=2\nnode3\nnode5 count=3\n");
  EXPECT_EQ(
      read_hostfile(path),
      (std::vector<Host>{{"node1", 8}, {"node2", 4}, {"node3", 2}, {"node4", 2}, {"node5", 3}}));
  testing::write_bytes(path, "node1 slots=8\nnode2\n");
  EXPECT_EQ(testing::user_error([&] { read_hostfile(path); }),
            "hostfile " + path +
                ", line 2: 'node2' has no slot count (Open MPI would give it one slot per core it "
                "finds there at launch): write 'node2 slots=N', N the ranks to run on it");
  testing::write_bytes(path, "node1\nnode1 slots=2\n");
  EXPECT_EQ(testing::user_error([&] { read_hostfile(path); }),
            "hostfile " + path +
                ", line 2: 'node1' is also on line 1. A host is either on one line with its "
                "count (node1 slots=N) or on one line per slot, as Open MPI reads a hostfile");
  testing::write_bytes(path, "node1 slots=4 max_slots=2\n");
  EXPECT_EQ(testing::user_error([&] { read_hostfile(path); }),
            "hostfile " + path + ", line 1: slots=4 is more than max_slots=2");
  testing::write_bytes(path, "node1 slots=8\nnode2 cpus=4\n");
  EXPECT_EQ(testing::user_error([&] { read_hostfile(path); }),
            "hostfile " + path + ", line 2: 'cpus=4' is not slots=N or max_slots=N");
  testing::write_bytes(path, "node1 slots=x\n");
  EXPECT_EQ(testing::user_error([&] { read_hostfile(path); }),
            "hostfile " + path + ", line 1: slots 'x' must be a positive integer");
  testing::write_bytes(path, "# nothing\n");
  EXPECT_EQ(testing::user_error([&] { read_hostfile(path); }),
            "hostfile " + path + ": names no host");
  EXPECT_EQ(testing::user_error([&] { read_hostfile(dir.file("missing")); }),
            "hostfile " + dir.file("missing") + ": cannot be read");
}

TEST(Launcher, WithoutOptionDropsTheOptionAndItsValue) {
  const std::vector<std::string> args = {"strata", "serve",        "--api-key",    "k1", "--port",
                                         "0",      "--api-key=k2", "--checkpoint", "c"};
  EXPECT_EQ(without_option(args, "--api-key"),
            (std::vector<std::string>{"strata", "serve", "--port", "0", "--checkpoint", "c"}));
}

TEST(Launcher, CommandRejectsBadRankCounts) {
  EXPECT_THROW(mpirun_command(LaunchTarget{0}, {"strata"}, 4, false), UserError);
  EXPECT_THROW(relaunch_under_mpirun(-1, {"strata"}), UserError);
}

TEST(Launcher, RelaunchWithoutMpirunIsAUserError) {
  testing::TempDir empty("strata-no-mpirun");
  ScopedEnv path("PATH", empty.path().c_str());
  EXPECT_CONTAINS(testing::user_error([] {
                    relaunch_under_mpirun(2, {"strata", "train"});
                  }),
                  "could not start mpirun");
}

TEST(Launcher, StartedByMpiLauncher) {
  ScopedEnv a("OMPI_COMM_WORLD_SIZE", nullptr), b("PMI_SIZE", nullptr), c("PMIX_RANK", nullptr),
      d("SLURM_PROCID", nullptr);
  EXPECT_FALSE(started_by_mpi_launcher());
  {
    ScopedEnv set("OMPI_COMM_WORLD_SIZE", "4");
    EXPECT_TRUE(started_by_mpi_launcher());
  }
  {
    ScopedEnv set("SLURM_PROCID", "0");
    EXPECT_TRUE(started_by_mpi_launcher());
  }
}

TEST(Launcher, ConfigureRankThreads) {
  const int before = at::get_num_threads();
  ScopedEnv local("OMPI_COMM_WORLD_LOCAL_SIZE", nullptr);
  {
    ScopedEnv threads("STRATA_THREADS", nullptr);
    EXPECT_EQ(configure_rank_threads(3), 3);
    EXPECT_EQ(at::get_num_threads(), 3);
    EXPECT_EQ(configure_rank_threads(0), available_cores());  // one local rank
    ScopedEnv four_ranks("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
    EXPECT_EQ(configure_rank_threads(0), threads_per_rank(available_cores(), 4));
  }
  {
    ScopedEnv threads("STRATA_THREADS", "2");
    EXPECT_EQ(configure_rank_threads(0), 2);
    EXPECT_EQ(at::get_num_threads(), 2);
  }
  {
    ScopedEnv threads("STRATA_THREADS", "two");
    EXPECT_EQ(testing::user_error([] { configure_rank_threads(0); }),
              "$STRATA_THREADS='two' must be a positive integer");
  }
  at::set_num_threads(before);
}

}  // namespace
}  // namespace strata
