// The timed probe that chooses each product class's route (matmul.h) on this machine: every
// candidate route of a class is timed on the shapes the run will multiply in that class, and
// the fastest takes the class. The default keeps it unless another is at least 10% faster, so
// timing noise does not flip a choice between runs, and in a class whose products all take
// under 1 ms (a small model's: dispatch overheads and clock noise), so a small model runs as it
// always did. The result depends on the CPU, its
// features, the thread count and the libraries, and the shapes: cached_product_probe keeps it
// in a file keyed by all of these, so a machine probes a run's shapes once.
//
// A bf16 run also times its attention (the blockwise kernel's forward and backward at the run's
// heads, rows and head size) with the tiles multiplied as bf16 and as float32 copies
// (tile_gemm.h's attention_tiles_in_bf16), by the same margins against the default rule.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strata/kernels/matmul.h"
#include "strata/kernels/matmul_peak.h"

namespace strata {

// One product a run multiplies: a (m, k) times op(b) (k, n), in matmul.h's terms.
struct ProductShape {
  int64_t m = 0, n = 0, k = 0;
  bool a_transposed = false, b_transposed = true;

  bool operator==(const ProductShape& other) const {
    return m == other.m && n == other.n && k == other.k && a_transposed == other.a_transposed &&
           b_transposed == other.b_transposed;
  }
};

struct ProbedClass {
  ProductClass product;
  ProductRoute route;  // the one chosen
  int64_t shapes = 0;  // how many of the run's shapes the class holds
  // Each candidate's seconds for one product of every shape of the class.
  std::vector<std::pair<ProductRoute, double>> seconds;
};

// The attention one rank computes in a step: query heads, key/value heads, rows (keys and
// queries alike) and head size. seq 0: none (eager attention). Only bf16 probes time it.
struct AttentionShape {
  int64_t heads = 0, kv_heads = 0, seq = 0, head_dim = 0;
};

// The bf16 attention tiles' choice: how long one forward and backward of the probe's attention
// took each way, and the way chosen.
struct ProbedAttention {
  AttentionShape timed;  // the shape timed: one batch row, at most kProbedAttentionRows rows
  bool in_bf16 = false;
  double bf16_seconds = 0, float32_seconds = 0;
};
constexpr int64_t kProbedAttentionRows = 1024;

struct ProductProbe {
  std::string key;  // product_probe_key: what the timings depend on
  std::vector<ProbedClass> classes;
  std::optional<ProbedAttention> attention;  // bf16 runs where both ways exist
  bool from_cache = false;                   // read from the cache file, not timed by this process

  // Installs the chosen routes (use_product_routes) and attention tiles (use_attention_tiles; the
  // default rule without a choice).
  void use() const;
  // One line per class, for files, broadcasts and `strata env`; from_text reads it back and
  // throws UserError naming `origin` when the text is not one.
  std::string to_text() const;
  static ProductProbe from_text(const std::string& text, const std::string& origin);
};

// The CPU model and features, the thread count, libtorch's and oneDNN's versions, OpenBLAS's
// configuration and core, the dtype, the shapes and the attention, as one line.
std::string product_probe_key(at::ScalarType dtype, const std::vector<ProductShape>& shapes,
                              const AttentionShape& attention = {});

// Times the candidates of every class the shapes fall in (random operands of `dtype`; products
// the few-row kernel takes whatever the class are left out) with `timer`, and chooses; then,
// for bf16 where oneDNN's bf16 GEMM is loaded and `attention` has rows, the attention tiles
// both ways (the default rule's way first), and chooses.
ProductProbe probe_products(at::ScalarType dtype, const std::vector<ProductShape>& shapes,
                            const ProductTimer& timer = fastest_of_three_calls,
                            const AttentionShape& attention = {});

// cache_dir/products/<hash of the key>.txt: where cached_product_probe keeps the probe of `key`.
std::string product_probe_file(const std::string& cache_dir, const std::string& key);

// probe_products, kept in product_probe_file: read when the file is there
// and holds the same key, else probed and written (atomically; a file that cannot be read back is
// probed again and replaced, a cache that cannot be written costs a probe per run, each with a
// line on stderr, never an error).
ProductProbe cached_product_probe(at::ScalarType dtype, const std::vector<ProductShape>& shapes,
                                  const AttentionShape& attention, const std::string& cache_dir);

// cached_product_probe under default_cache_dir() (core/cache_dir.h); probe_products, with a line
// on stderr, where there is no cache directory.
ProductProbe cached_product_probe(at::ScalarType dtype, const std::vector<ProductShape>& shapes,
                                  const AttentionShape& attention = {});

}  // namespace strata
