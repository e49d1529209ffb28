// CPU detection (cpu.h): the compiler's feature check, /proc/cpuinfo for the model name, dlsym
// for the libraries libtorch loaded, and STRATA_CPU_PATH.
#include "strata/kernels/cpu.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "strata/core/error.h"

namespace strata {
namespace {

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "unknown" : line.substr(start);
  }
  return "unknown";
}

void detect_features(CpuInfo& info) {
#if defined(STRATA_VECTOR_TARGETS)
  __builtin_cpu_init();
  info.avx2 = __builtin_cpu_supports("avx2");
  info.fma = __builtin_cpu_supports("fma");
  info.avx512f = __builtin_cpu_supports("avx512f");
#if defined(STRATA_CPU_SUPPORTS_AMX)
  info.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  info.amx_bf16 = __builtin_cpu_supports("amx-bf16");
#endif
  info.vector_paths_built = true;
  // The variants' target attributes (vector_lanes.h): "avx512f", and "avx2,fma".
  info.best_path = info.avx512f            ? VectorPath::avx512
                   : info.avx2 && info.fma ? VectorPath::avx2
                                           : VectorPath::generic;
#endif
}

void find_libraries(CpuInfo& info) {
  info.onednn_sgemm = dlsym(RTLD_DEFAULT, "dnnl_sgemm");
  info.onednn_gemm_bf16 = dlsym(RTLD_DEFAULT, "dnnl_gemm_bf16bf16f32");
  info.gomp_parallel = dlsym(RTLD_DEFAULT, "GOMP_parallel");
  info.openblas_set_num_threads = dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
  using Text = const char* (*)();
  if (auto config = reinterpret_cast<Text>(dlsym(RTLD_DEFAULT, "openblas_get_config"))) {
    info.openblas_config = config();
  }
  if (auto core = reinterpret_cast<Text>(dlsym(RTLD_DEFAULT, "openblas_get_corename"))) {
    info.openblas_core = core();
  }
  if (const char* coretype = std::getenv("OPENBLAS_CORETYPE")) info.openblas_coretype = coretype;
}

CpuInfo detect() {
  CpuInfo info;
  info.model = cpu_model_name();
  detect_features(info);
  if (const char* requested = std::getenv("STRATA_CPU_PATH")) info.requested_path = requested;
  info.vector_path = choose_vector_path(info.requested_path, info.best_path);
  info.bf16_dot = info.avx512_bf16 && info.vector_path == VectorPath::avx512;
  find_libraries(info);
  return info;
}

}  // namespace

const char* vector_path_name(VectorPath path) {
  switch (path) {
    case VectorPath::avx512:
      return "avx512";
    case VectorPath::avx2:
      return "avx2";
    case VectorPath::generic:
      return "generic";
  }
  return "generic";
}

VectorPath choose_vector_path(const std::string& requested, VectorPath best) {
  if (requested.empty()) return best;
  for (VectorPath path : {VectorPath::generic, VectorPath::avx2, VectorPath::avx512}) {
    if (requested != vector_path_name(path)) continue;
    if (path > best) {
      std::fprintf(stderr, "strata: STRATA_CPU_PATH=%s is beyond this CPU or build; running %s\n",
                   requested.c_str(), vector_path_name(best));
    }
    return std::min(path, best);
  }
  throw UserError(str("$STRATA_CPU_PATH='", requested,
                      "' must be one of avx512, avx2, generic (or unset: the best this CPU runs)"));
}

const CpuInfo& cpu_info() {
  static const CpuInfo info = detect();
  return info;
}

std::string cpu_feature_list(const CpuInfo& info) {
  std::string list;
  const std::pair<const char*, bool> features[] = {{"avx2", info.avx2},
                                                   {"fma", info.fma},
                                                   {"avx512f", info.avx512f},
                                                   {"avx512_bf16", info.avx512_bf16},
                                                   {"amx_bf16", info.amx_bf16}};
  for (const auto& [name, present] : features) {
    if (!present) continue;
    if (!list.empty()) list += ' ';
    list += name;
  }
  return list;
}

}  // namespace strata
