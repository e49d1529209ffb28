// `strata env`: every field a bug report needs is there and true: the commit, libtorch's
// version, the MPI library (without mpirun), the BLAS libraries mapped, CPU features that agree
// with /proc/cpuinfo, the vector path STRATA_CPU_PATH forces, and the kernel paths of typical
// products; the text form carries the same.
#include <gtest/gtest.h>
#include <torch/version.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "test_support.h"

namespace strata {
namespace {

const std::string kStrata = STRATA_BINARY;

nlohmann::json env_json(const std::string& prefix = "") {
  std::string output;
  EXPECT_EQ(testing::run_command(prefix + kStrata + " env --json", &output), 0) << output;
  const size_t start = output.find('{');  // past any clamping notice on stderr
  EXPECT_NE(start, std::string::npos) << output;
  return nlohmann::json::parse(output.substr(start == std::string::npos ? 0 : start));
}

TEST(Env, ReportsVersionsLibrariesAndTheCpu) {
  const nlohmann::json env = env_json();
  const std::string commit = env["strata_commit"];
  EXPECT_TRUE(commit == "unknown" || std::regex_match(commit, std::regex("[0-9a-f]{12}")))
      << commit;
  EXPECT_EQ(env["libtorch"].get<std::string>().rfind(std::to_string(TORCH_VERSION_MAJOR) + ".", 0),
            0u)
      << env["libtorch"];
  EXPECT_NE(env["mpi"].get<std::string>().find("MPI"), std::string::npos) << env["mpi"];
  for (const auto& path : env["blas"]["libraries"]) {
    EXPECT_NE(path.get<std::string>().find("blas"), std::string::npos) << path;
  }
  EXPECT_TRUE(env["onednn_sgemm"].is_boolean());
  EXPECT_TRUE(env["libgomp"].get<bool>()) << "libtorch brings libgomp in on Debian";
  EXPECT_GE(env["threads"].get<int>(), 1);

  const nlohmann::json& cpu = env["cpu"];
  EXPECT_FALSE(cpu["model"].get<std::string>().empty());
  EXPECT_EQ(cpu["forced_path"], "");
  EXPECT_EQ(cpu["vector_path"], cpu["best_path"]);
  const std::set<std::string> flags = testing::cpuinfo_flags();
  std::istringstream listed(cpu["features"].get<std::string>());
  std::set<std::string> features;
  for (std::string word; listed >> word;) features.insert(word);
  if (cpu["vector_paths_built"].get<bool>() && !flags.empty()) {
    for (const std::string feature : {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16"}) {
      EXPECT_EQ(features.count(feature), flags.count(feature)) << feature;
    }
    EXPECT_EQ(cpu["best_path"], flags.count("avx512f")                      ? "avx512"
                                : flags.count("avx2") && flags.count("fma") ? "avx2"
                                                                            : "generic");
  }
}

// A few float32 rows take the few-row kernel; 1024 rows the blocked product (oneDNN's where
// it is loaded); bf16 the same, in float32 where the CPU lacks AMX.
TEST(Env, ReportsThePathOfEachProduct) {
  const nlohmann::json env = env_json();
  const bool amx = env["cpu"]["features"].get<std::string>().find("amx_bf16") != std::string::npos;
  const std::string blocked = env["onednn_sgemm"].get<bool>() ? "oneDNN sgemm" : "ATen matmul";
  ASSERT_EQ(env["products"].size(), 4u);
  for (const auto& product : env["products"]) {
    const bool bf16 = product["dtype"] == "bfloat16";
    const bool few = product["rows"].get<int64_t>() == 8;
    EXPECT_EQ(product["in_float32"].get<bool>(), bf16 && !amx) << product;
    EXPECT_EQ(product["path"], bf16 && amx ? "ATen matmul"
                               : few       ? "few-row kernel"
                                           : blocked)
        << product;
  }
}

TEST(Env, ShowsTheForcedPathAndPrintsText) {
  const nlohmann::json env = env_json("STRATA_CPU_PATH=generic ");
  EXPECT_EQ(env["cpu"]["forced_path"], "generic");
  EXPECT_EQ(env["cpu"]["vector_path"], "generic");

  std::string output;
  ASSERT_EQ(testing::run_command("STRATA_CPU_PATH=avx2 " + kStrata + " env", &output), 0) << output;
  for (const std::string key : {"strata ", "libtorch ", "mpi ", "blas ", "openblas core ",
                                "onednn ", "cpu ", "features ", "vector path ", "product "}) {
    EXPECT_NE(("\n" + output).find("\n" + key), std::string::npos) << key << " in\n" << output;
  }
  EXPECT_NE(output.find("STRATA_CPU_PATH avx2)"), std::string::npos) << output;
  EXPECT_NE(testing::run_command("STRATA_CPU_PATH=sse " + kStrata + " env", &output), 0);
  EXPECT_NE(output.find("STRATA_CPU_PATH"), std::string::npos) << output;
}

}  // namespace
}  // namespace strata
