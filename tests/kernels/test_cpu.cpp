// CPU detection (kernels/cpu.h): the features agree with /proc/cpuinfo, the best path follows
// from them, STRATA_CPU_PATH forces the path down and is clamped above the best, a bad value is
// a UserError naming the variable; and the path this binary runs is the one its ctest entry
// asked for (kernels.unit.avx2 and kernels.unit.generic run every kernel test on those paths).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "expect_error.h"
#include "strata/kernels/cpu.h"
#include "test_support.h"

namespace strata {
namespace {

TEST(Cpu, FeaturesAgreeWithProcCpuinfo) {
  const CpuInfo& info = cpu_info();
  const std::set<std::string> flags = testing::cpuinfo_flags();
  if (!info.vector_paths_built || flags.empty()) {
    // Without the compiler's check nothing is claimed, and only the generic path exists.
    EXPECT_EQ(cpu_feature_list(info), "");
    EXPECT_EQ(info.best_path, VectorPath::generic);
    return;
  }
  for (const std::string feature : {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16"}) {
    const size_t listed = (" " + cpu_feature_list(info) + " ").find(" " + feature + " ");
    EXPECT_EQ(listed != std::string::npos, flags.count(feature) == 1) << feature;
  }
  EXPECT_NE(info.model, "");
}

TEST(Cpu, BestPathFollowsTheFeatures) {
  const CpuInfo& info = cpu_info();
  const VectorPath want = !info.vector_paths_built ? VectorPath::generic
                          : info.avx512f           ? VectorPath::avx512
                          : info.avx2 && info.fma  ? VectorPath::avx2
                                                   : VectorPath::generic;
  EXPECT_EQ(info.best_path, want);
}

TEST(Cpu, RequestedPathIsClampedToTheBest) {
  for (VectorPath best : {VectorPath::generic, VectorPath::avx2, VectorPath::avx512}) {
    EXPECT_EQ(choose_vector_path("", best), best);
    EXPECT_EQ(choose_vector_path("generic", best), VectorPath::generic);
    EXPECT_EQ(choose_vector_path("avx2", best),
              best == VectorPath::generic ? VectorPath::generic : VectorPath::avx2);
    EXPECT_EQ(choose_vector_path("avx512", best), best);
  }
  testing::expect_user_error([] { choose_vector_path("sse", VectorPath::avx512); },
                             {"STRATA_CPU_PATH", "'sse'", "avx512, avx2, generic"});
}

// The ctest entries kernels.unit.avx2 and kernels.unit.generic set STRATA_CPU_PATH; this says
// which path the kernels of this run took, so a clamped run is visible and still checked.
TEST(Cpu, RunsTheRequestedPath) {
  const CpuInfo& info = cpu_info();
  const char* requested = std::getenv("STRATA_CPU_PATH");
  EXPECT_EQ(info.requested_path, requested ? requested : "");
  EXPECT_EQ(info.vector_path, choose_vector_path(info.requested_path, info.best_path));
  EXPECT_EQ(vector_path(), info.vector_path);
  if (info.requested_path == "generic") {
    EXPECT_EQ(vector_path(), VectorPath::generic);
  }
  if (info.requested_path == "avx2" && info.avx2 && info.fma && info.vector_paths_built) {
    EXPECT_EQ(vector_path(), VectorPath::avx2);
  }
  std::printf("[ path     ] vector path %s (best %s, STRATA_CPU_PATH '%s')\n",
              vector_path_name(info.vector_path), vector_path_name(info.best_path),
              info.requested_path.c_str());
}

}  // namespace
}  // namespace strata
