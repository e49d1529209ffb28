// What this process found about the CPU and the libraries libtorch brought in, detected once
// and asked by everything that chooses code by it: the vectorized kernels' paths (AVX-512,
// AVX2 or generic), the product routing's bf16 rule (AMX), the tile products (oneDNN's sgemm),
// the thread team (libgomp) and the launcher's BLAS thread count (OpenBLAS). `strata env`
// prints it.
//
// STRATA_CPU_PATH=avx512|avx2|generic, read once, forces the vectorized kernels down to that
// path (tests run each one on every host). A path beyond what this CPU and build can run is
// clamped to the best one they can, with a line on stderr; any other value is a UserError.
#pragma once
#include <string>

namespace strata {

// Ordered: each path runs on every CPU that runs the one above it.
enum class VectorPath { generic, avx2, avx512 };

const char* vector_path_name(VectorPath path);

struct CpuInfo {
  std::string model;  // /proc/cpuinfo's "model name", else "unknown"
  // Features as the compiler's run-time check sees them (__builtin_cpu_supports: the CPU has
  // them and the OS saves their registers); all false in a build without vector paths, the
  // last two also where the compiler does not know them (STRATA_CPU_SUPPORTS_AMX).
  bool avx2 = false, fma = false, avx512f = false, avx512_bf16 = false, amx_bf16 = false;
  // Whether this build compiled the avx512 and avx2 variants (the CMake check
  // STRATA_VECTOR_TARGETS: GCC or Clang on x86-64); without them only generic exists.
  bool vector_paths_built = false;
  VectorPath best_path = VectorPath::generic;    // the best this CPU and build run
  VectorPath vector_path = VectorPath::generic;  // the one the kernels run (after the variable)
  std::string requested_path;                    // STRATA_CPU_PATH, empty when unset
  // Whether bf16 operands meet in AVX512-BF16's dot product (the few-row kernel's Dot): the
  // CPU has avx512_bf16 and the kernels run the avx512 path.
  bool bf16_dot = false;

  // Entry points found in the process (dlsym), null when absent. Looked up rather than linked:
  // libtorch_cpu brings libdnnl, libgomp and the BLAS in without re-exporting them.
  void* onednn_sgemm = nullptr;              // dnnl_sgemm (oneDNN's C API)
  void* onednn_gemm_bf16 = nullptr;          // dnnl_gemm_bf16bf16f32 (the same, bf16 operands)
  void* gomp_parallel = nullptr;             // GOMP_parallel (GCC's OpenMP ABI)
  void* openblas_set_num_threads = nullptr;  // void openblas_set_num_threads(int)
  std::string openblas_config;               // openblas_get_config(), empty without OpenBLAS
  std::string openblas_core;                 // openblas_get_corename(): the kernels it runs
  std::string openblas_coretype;             // $OPENBLAS_CORETYPE, empty when unset
};

// Detected on the first call (which reads STRATA_CPU_PATH and may throw UserError for a bad
// value); the same object afterwards.
const CpuInfo& cpu_info();

// The path of STRATA_CPU_PATH=`requested` on a CPU whose best path is `best`: `best` when
// requested is empty, else the requested path clamped to `best` (with a line on stderr when it
// is clamped); a value other than avx512, avx2, generic is a UserError.
VectorPath choose_vector_path(const std::string& requested, VectorPath best);

// The path the vectorized kernels take: cpu_info().vector_path.
inline VectorPath vector_path() { return cpu_info().vector_path; }

// The CPU features this process uses, as "avx2 fma avx512f ..." (those present only).
std::string cpu_feature_list(const CpuInfo& info);

}  // namespace strata
