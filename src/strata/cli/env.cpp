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
#include "strata/kernels/attention.h"
#include "strata/kernels/cpu.h"
#include "strata/kernels/matmul.h"
#include "strata/kernels/product_probe.h"
#include "strata/kernels/skinny_gemm.h"
#include "strata/kernels/tile_gemm.h"

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

// The routes of the products of a d_model 768 layer (GPT-2 small's: q, k, v and the output
// projection 768 x 768, the MLP 768 x 3072 and back, 12 heads of 64) training on 512 rows, in
// `dtype`: each class with the route this machine's probe chose and every candidate's seconds
// (kernels/product_probe.h; probed once, then read from the cache), the few-row kernel's rows,
// and in bf16 the attention tiles' way.
nlohmann::json product_routes(at::ScalarType dtype) {
  std::vector<ProductShape> shapes;
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{768, 768}, {768, 3072}, {3072, 768}}) {
    shapes.push_back({512, out, in, false, true});
    shapes.push_back({512, in, out, false, false});
    shapes.push_back({out, in, 512, true, false});
  }
  const ProductProbe probe = cached_product_probe(dtype, shapes, {12, 12, 512, 64});
  nlohmann::json classes = nlohmann::json::array();
  classes.push_back({{"class", dtype_name(dtype) + " x.w^T"},
                     {"rows", str("up to ", kSkinnyRows)},
                     {"route", route_name(route_product(at::empty({1, 8}, dtype),
                                                        at::empty({8, 8}, dtype), false, true))},
                     {"seconds", nlohmann::json::object()}});
  for (const ProbedClass& probed : probe.classes) {
    nlohmann::json seconds = nlohmann::json::object();
    for (const auto& [route, time] : probed.seconds) seconds[route_name(route)] = time;
    classes.push_back({{"class", class_name(probed.product)},
                       {"rows", str("512 (", probed.shapes, " shapes)")},
                       {"route", route_name(probed.route)},
                       {"default", route_name(default_route(probed.product))},
                       {"seconds", seconds}});
  }
  if (dtype == at::kBFloat16) {  // the tiles of bf16 attention (kernels/tile_gemm.h)
    const std::string as_bf16 = "oneDNN bf16 GEMM (dnnl_gemm_bf16bf16f32)";
    const std::string as_float32 = preferred_tile_gemm_backend() == TileGemmBackend::onednn
                                       ? "oneDNN sgemm on float32 copies"
                                       : "ATen matmul on float32 copies";
    nlohmann::json seconds = nlohmann::json::object();
    std::string rows = str("up to ", kAttentionQueryTile);
    if (probe.attention) {
      seconds[as_bf16] = probe.attention->bf16_seconds;
      seconds[as_float32] = probe.attention->float32_seconds;
      rows = str(probe.attention->timed.seq, " (", probe.attention->timed.heads,
                 " heads, forward and backward)");
    }
    probe.use();  // the way this probe chooses, the default rule without a choice
    classes.push_back({{"class", "bfloat16 attention tiles"},
                       {"rows", rows},
                       {"route", attention_tiles_in_bf16() ? as_bf16 : as_float32},
                       {"seconds", seconds}});
    ProductProbe{}.use();
  }
  return classes;
}

nlohmann::json environment() {
  const CpuInfo& cpu = cpu_info();
  nlohmann::json products = nlohmann::json::array();
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (const auto& route : product_routes(dtype)) products.push_back(route);
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
      {"onednn_gemm_bf16", cpu.onednn_gemm_bf16 != nullptr},
      {"libgomp", cpu.gomp_parallel != nullptr},
      {"cpu",
       {{"model", cpu.model},
        {"features", features},
        {"vector_paths_built", cpu.vector_paths_built},
        {"best_path", vector_path_name(cpu.best_path)},
        {"vector_path", vector_path_name(cpu.vector_path)},
        {"bf16_dot", cpu.bf16_dot},
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
  std::string onednn;
  if (env["onednn_sgemm"].get<bool>()) onednn = "dnnl_sgemm";
  if (env["onednn_gemm_bf16"].get<bool>())
    onednn += (onednn.empty() ? "" : ", ") + std::string("dnnl_gemm_bf16bf16f32");
  line("onednn", onednn.empty() ? "absent" : onednn + " loaded");
  line("openmp", env["libgomp"].get<bool>() ? "libgomp loaded" : "absent");
  line("cpu", or_none(cpu["model"]));
  line("features", or_none(cpu["features"]));
  line("vector path", or_none(cpu["vector_path"]) + " (best " + or_none(cpu["best_path"]) +
                          ", STRATA_CPU_PATH " + or_none(cpu["forced_path"]) + ")");
  line("bf16 products", cpu["bf16_dot"].get<bool>() ? "few-row kernel: AVX512-BF16 dot product"
                                                    : "few-row kernel: widened to float32");
  line("threads", std::to_string(env["threads"].get<int>()));
  for (const auto& product : env["products"]) {
    std::string timings;
    for (const auto& [route, seconds] : product["seconds"].items()) {
      timings += str(timings.empty() ? " (" : ", ", route, " ",
                     static_cast<int64_t>(seconds.get<double>() * 1e6), " us");
    }
    line("product", str(or_none(product["class"]), ", ", or_none(product["rows"]),
                        " rows: ", or_none(product["route"]), timings, timings.empty() ? "" : ")"));
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
