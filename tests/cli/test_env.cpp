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
  EXPECT_TRUE(env["onednn_gemm_bf16"].is_boolean());
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

// A few rows take the few-row kernel (bf16 rows in float32 only without AVX512-BF16's dot
// product); each class of larger products the route the probe chose among its candidates: the
// default, or one at least 10% faster than the default (both timings shown), in float32 and
// bf16, for the forward and both gradients. bf16 attention tiles: where oneDNN's bf16 GEMM is
// loaded, timed both ways, and the default rule's way (as bf16 where the bf16 forward products
// are) unless the other is at least 10% faster; float32 copies without the GEMM.
TEST(Env, ReportsTheRouteOfEachProductClassWithItsTimings) {
  const nlohmann::json env = env_json();
  const std::string blocked = env["onednn_sgemm"].get<bool>() ? "oneDNN sgemm" : "ATen matmul";
  std::set<std::string> classes;
  std::string bf16_forward_route, attention_route;
  nlohmann::json attention;
  for (const auto& product : env["products"]) {
    const std::string name = product["class"], route = product["route"];
    classes.insert(name + " " + product["rows"].get<std::string>().substr(0, 5));
    if (product["rows"] == "up to 48") {
      const bool widened = name.rfind("bfloat16", 0) == 0 && !env["cpu"]["bf16_dot"].get<bool>();
      EXPECT_EQ(route, widened ? "few-row kernel in float32" : "few-row kernel") << product;
      continue;
    }
    if (name == "bfloat16 attention tiles") {
      attention_route = route;
      attention = product;
      continue;
    }
    if (name == "bfloat16 x.w^T") bf16_forward_route = route;
    const nlohmann::json& seconds = product["seconds"];
    const std::string by_default = product["default"];
    ASSERT_TRUE(seconds.contains(route) && seconds.contains(by_default)) << product;
    if (route != by_default) {
      EXPECT_LT(seconds[route].get<double>(), 0.9 * seconds[by_default].get<double>()) << product;
    }
    if (name.rfind("float32 ", 0) == 0) {
      EXPECT_EQ(by_default, blocked) << product;
    }
  }
  for (const std::string dtype : {"float32", "bfloat16"}) {
    for (const std::string layout : {"x.w^T up to", "x.w^T 512 (", "dy.w 512 (", "dy^T.x 512 ("}) {
      EXPECT_EQ(classes.count(dtype + " " + layout), 1u)
          << dtype << " " << layout << " in " << env["products"];
    }
  }
  const std::string as_bf16 = "oneDNN bf16 GEMM (dnnl_gemm_bf16bf16f32)",
                    as_float32 = blocked + " on float32 copies";
  if (!env["onednn_gemm_bf16"].get<bool>()) {
    EXPECT_EQ(attention_route, as_float32) << env["products"];
    return;
  }
  EXPECT_EQ(attention["rows"], "512 (12 heads, forward and backward)") << attention;
  const nlohmann::json& seconds = attention["seconds"];
  ASSERT_TRUE(seconds.contains(as_bf16) && seconds.contains(as_float32)) << attention;
  const std::string by_default = bf16_forward_route == "ATen matmul" ? as_bf16 : as_float32;
  const std::string other = by_default == as_bf16 ? as_float32 : as_bf16;
  const double default_seconds = seconds[by_default].get<double>();
  const bool switched =
      default_seconds >= 1e-3 && seconds[other].get<double>() < 0.9 * default_seconds;
  EXPECT_EQ(attention_route, switched ? other : by_default) << attention;
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
