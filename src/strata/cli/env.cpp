// `strata env` (env.h): the report assembled as JSON, printed as it is or as aligned lines.
#include "strata/cli/env.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "strata/cli/build_commit.h"
#include "strata/core/error.h"
#include "strata/dist/mpi_version.h"
#include "strata/kernels/cpu.h"
#include "strata/kernels/matmul.h"

namespace strata {
namespace {

// The BLAS libraries mapped into this process (libtorch's libblas.so.3 resolves through
// Debian's alternatives to OpenBLAS, BLIS or the reference BLAS; the path says which).
std::vector<std::string> blas_libraries() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> found;
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const std::string name = path.substr(path.rfind('/') + 1);
    if (name.find("blas") != std::string::npos) found.insert(path);
  }
  return {found.begin(), found.end()};
}

// The path of a linear layer's forward product: `rows` rows of d_model 768 by a 768 x 768
// weight, in `dtype`.
nlohmann::json product_row(int64_t rows, at::ScalarType dtype) {
  const at::Tensor x = at::empty({rows, 768}, at::dtype(dtype));
  const at::Tensor weight = at::empty({768, 768}, at::dtype(dtype));
  const ProductRoute route = route_product(x, weight, false, true);
  return {{"dtype", dtype == at::kFloat ? "float32" : "bfloat16"},
          {"rows", rows},
          {"k", 768},
          {"n", 768},
          {"path", product_path_name(route.path)},
          {"in_float32", route.in_float32}};
}

nlohmann::json environment() {
  const CpuInfo& cpu = cpu_info();
  nlohmann::json products = nlohmann::json::array();
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (int64_t rows : {int64_t{8}, int64_t{1024}}) products.push_back(product_row(rows, dtype));
  }
  const std::string features = cpu_feature_list(cpu);
  return {
      {"strata_commit", kStrataCommit},
      {"libtorch", TORCH_VERSION},
      {"mpi", mpi_library_version()},
      {"blas",
       {{"libraries", blas_libraries()},
        {"openblas_config", cpu.openblas_config},
        {"openblas_core", cpu.openblas_core},
        {"openblas_coretype", cpu.openblas_coretype}}},
      {"onednn_sgemm", cpu.onednn_sgemm != nullptr},
      {"libgomp", cpu.gomp_parallel != nullptr},
      {"cpu",
       {{"model", cpu.model},
        {"features", features},
        {"vector_paths_built", cpu.vector_paths_built},
        {"best_path", vector_path_name(cpu.best_path)},
        {"vector_path", vector_path_name(cpu.vector_path)},
        {"forced_path", cpu.requested_path}}},
      {"threads", at::get_num_threads()},
      {"products", products},
  };
}

// A string field, or "(none)" when it is empty.
std::string or_none(const nlohmann::json& field) {
  const std::string text = field.get<std::string>();
  return text.empty() ? "(none)" : text;
}

void print_text(const nlohmann::json& env) {
  const auto line = [](const std::string& key, const std::string& value) {
    std::cout << key << std::string(key.size() < 14 ? 14 - key.size() : 1, ' ') << value << "\n";
  };
  const nlohmann::json& blas = env["blas"];
  const nlohmann::json& cpu = env["cpu"];
  std::string libraries;
  for (const auto& path : blas["libraries"]) {
    libraries += (libraries.empty() ? "" : " ") + path.get<std::string>();
  }
  line("strata", or_none(env["strata_commit"]));
  line("libtorch", or_none(env["libtorch"]));
  line("mpi", or_none(env["mpi"]));
  line("blas", libraries.empty() ? "(none)" : libraries);
  line("openblas", or_none(blas["openblas_config"]));
  line("openblas core", or_none(blas["openblas_core"]) + " (OPENBLAS_CORETYPE " +
                            or_none(blas["openblas_coretype"]) + ")");
  line("onednn", env["onednn_sgemm"].get<bool>() ? "dnnl_sgemm loaded" : "absent");
  line("openmp", env["libgomp"].get<bool>() ? "libgomp loaded" : "absent");
  line("cpu", or_none(cpu["model"]));
  line("features", or_none(cpu["features"]));
  line("vector path", or_none(cpu["vector_path"]) + " (best " + or_none(cpu["best_path"]) +
                          ", STRATA_CPU_PATH " + or_none(cpu["forced_path"]) + ")");
  line("threads", std::to_string(env["threads"].get<int>()));
  for (const auto& product : env["products"]) {
    line("product", str(or_none(product["dtype"]), " ", product["rows"].get<int64_t>(),
                        " x 768 by 768: ", or_none(product["path"]),
                        product["in_float32"].get<bool>() ? " (in float32)" : ""));
  }
}

}  // namespace

CLI::App* add_env_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* command = app.add_subcommand(
      "env", "Print what a bug report needs: versions, BLAS, CPU features, kernel paths");
  command->add_flag("--json", *json, "Print it as JSON");
  command->callback([json] {
    try {
      const nlohmann::json env = environment();
      if (*json) {
        std::cout << env.dump(2) << std::endl;
      } else {
        print_text(env);
        std::cout.flush();
      }
    } catch (const UserError& error) {
      std::cerr << "strata: error: " << error.what() << std::endl;
      throw CLI::RuntimeError(2);
    }
  });
  return command;
}

}  // namespace strata
