// The product probe (product_probe.h): time, choose, cache.
#include "strata/kernels/product_probe.h"

#include <dlfcn.h>

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "strata/core/atomic_file.h"
#include "strata/core/cache_dir.h"
#include "strata/core/error.h"
#include "strata/core/hash.h"
#include "strata/kernels/attention.h"
#include "strata/kernels/cpu.h"
#include "strata/kernels/tile_gemm.h"

namespace strata {
namespace {

constexpr const char* kHeader = "strata product probe 1";
constexpr double kSwitchBelow = 0.9;  // another route takes a class at 0.9 of the default's time
// A class whose products take less on the default route keeps it: between such products the
// differences are dispatch overheads and clock noise, and a small model runs as it always did.
constexpr double kWorthChoosing = 1e-3;  // seconds

// oneDNN's version (dnnl_version(), found like dnnl_sgemm), "" without oneDNN.
std::string onednn_version() {
  struct Version {
    int major, minor, patch;
    const char* hash;
  };
  using Query = const Version* (*)();
  auto query = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "dnnl_version"));
  if (query == nullptr) return "";
  const Version* version = query();
  return str(version->major, ".", version->minor, ".", version->patch, " ",
             version->hash != nullptr ? version->hash : "");
}

// Whether `other` takes the place of the default's `by_default` seconds.
bool worth_switching(double by_default, double other) {
  return by_default >= kWorthChoosing && other < kSwitchBelow * by_default;
}

// One forward and backward of the blockwise kernel on `shape` (one batch row, at most
// kProbedAttentionRows rows, bf16 in the model's (B, T, heads, D) memory order), timed with the
// tiles as bf16 and as float32 copies; the choice in force before is restored.
ProbedAttention probe_attention(const AttentionShape& shape, bool by_default_in_bf16,
                                const ProductTimer& timer) {
  ProbedAttention probed;
  probed.timed = shape;
  probed.timed.seq = std::min(shape.seq, kProbedAttentionRows);
  const AttentionShape& t = probed.timed;
  const auto random = [&t](int64_t heads) {
    return at::randn({1, t.seq, heads, t.head_dim}).to(at::kBFloat16).transpose(1, 2);
  };
  const at::Tensor q = random(t.heads), k = random(t.kv_heads), v = random(t.kv_heads),
                   dout = random(t.heads);
  const double scale = 1.0 / std::sqrt(static_cast<double>(t.head_dim));
  struct Restore {  // the choice in force before, also when the kernel throws
    std::optional<bool> before = chosen_attention_tiles();
    ~Restore() { use_attention_tiles(before); }
  } restore;
  for (const bool in_bf16 : {by_default_in_bf16, !by_default_in_bf16}) {
    use_attention_tiles(in_bf16);
    (in_bf16 ? probed.bf16_seconds : probed.float32_seconds) = timer([&] {
      const AttentionForward forward = blockwise_attention_forward(q, k, v, scale);
      blockwise_attention_backward(dout, q, k, v, forward.out, forward.lse, scale);
    });
  }
  const double by_default = by_default_in_bf16 ? probed.bf16_seconds : probed.float32_seconds;
  const double other = by_default_in_bf16 ? probed.float32_seconds : probed.bf16_seconds;
  probed.in_bf16 = worth_switching(by_default, other) ? !by_default_in_bf16 : by_default_in_bf16;
  return probed;
}

}  // namespace

void ProductProbe::use() const {
  std::vector<std::pair<ProductClass, ProductRoute>> routes;
  for (const ProbedClass& probed : classes) routes.emplace_back(probed.product, probed.route);
  use_product_routes(routes);
  use_attention_tiles(attention ? std::optional<bool>(attention->in_bf16) : std::nullopt);
}

std::string ProductProbe::to_text() const {
  std::ostringstream out;
  out << kHeader << "\nkey " << key << "\n";
  out.precision(9);
  for (const ProbedClass& probed : classes) {
    out << "class " << static_cast<int>(probed.product.dtype) << " " << probed.product.a_transposed
        << " " << probed.product.b_transposed << " " << probed.shapes << " "
        << static_cast<int>(probed.route.path) << " " << probed.route.in_float32;
    for (const auto& [route, seconds] : probed.seconds) {
      out << " " << static_cast<int>(route.path) << " " << route.in_float32 << " " << seconds;
    }
    out << "\n";
  }
  if (attention) {
    const AttentionShape& t = attention->timed;
    out << "attention " << t.heads << " " << t.kv_heads << " " << t.seq << " " << t.head_dim << " "
        << attention->in_bf16 << " " << attention->bf16_seconds << " " << attention->float32_seconds
        << "\n";
  }
  return out.str();
}

ProductProbe ProductProbe::from_text(const std::string& text, const std::string& origin) {
  const auto refuse = [&origin](const std::string& why) {
    return UserError(str(origin, " is not a product probe (", why,
                         "); delete it and the next run probes again"));
  };
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kHeader) throw refuse("its first line is not the header");
  if (!std::getline(in, line) || line.rfind("key ", 0) != 0) throw refuse("no key line");
  ProductProbe probe;
  probe.key = line.substr(4);
  const auto path_of = [&](int path) {
    if (path < 0 || path >= kProductPaths) throw refuse(str("path ", path));
    return static_cast<ProductPath>(path);
  };
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string word;
    if (line.rfind("attention ", 0) == 0) {
      ProbedAttention attention;
      AttentionShape& t = attention.timed;
      if (!(fields >> word >> t.heads >> t.kv_heads >> t.seq >> t.head_dim >> attention.in_bf16 >>
            attention.bf16_seconds >> attention.float32_seconds) ||
          !(fields >> std::ws).eof() || probe.attention) {
        throw refuse(str("line '", line, "'"));
      }
      probe.attention = attention;
      continue;
    }
    int dtype = 0, path = 0;
    ProbedClass probed;
    if (!(fields >> word >> dtype >> probed.product.a_transposed >> probed.product.b_transposed >>
          probed.shapes >> path >> probed.route.in_float32) ||
        word != "class") {
      throw refuse(str("line '", line, "'"));
    }
    probed.product.dtype = static_cast<at::ScalarType>(dtype);
    probed.route.path = path_of(path);
    ProductRoute route;
    double seconds = 0;
    while (fields >> path >> route.in_float32 >> seconds) {
      route.path = path_of(path);
      probed.seconds.emplace_back(route, seconds);
    }
    if (!fields.eof()) throw refuse(str("line '", line, "'"));
    probe.classes.push_back(probed);
  }
  return probe;
}

std::string product_probe_key(at::ScalarType dtype, const std::vector<ProductShape>& shapes,
                              const AttentionShape& attention) {
  const CpuInfo& cpu = cpu_info();
  std::string key =
      str("cpu '", cpu.model, "' [", cpu_feature_list(cpu), "] path ",
          vector_path_name(cpu.vector_path), cpu.bf16_dot ? " bf16 dot" : "", " threads ",
          at::get_num_threads(), " libtorch ", TORCH_VERSION, " onednn '", onednn_version(),
          "' openblas '", cpu.openblas_config, "' ", cpu.openblas_core, " ", cpu.openblas_coretype,
          " dtype ", c10::toString(dtype), " shapes");
  for (const ProductShape& shape : shapes) {
    key += str(" ", shape.m, "x", shape.n, "x", shape.k, shape.a_transposed ? "t" : "n",
               shape.b_transposed ? "t" : "n");
  }
  if (attention.seq > 0) {
    key += str(" attention ", attention.heads, "x", attention.kv_heads, "x", attention.seq, "x",
               attention.head_dim);
  }
  return key;
}

ProductProbe probe_products(at::ScalarType dtype, const std::vector<ProductShape>& shapes,
                            const ProductTimer& timer, const AttentionShape& attention) {
  at::NoGradGuard no_grad;
  ProductProbe probe;
  probe.key = product_probe_key(dtype, shapes, attention);
  for (const bool a_transposed : {false, true}) {
    for (const bool b_transposed : {false, true}) {
      ProbedClass probed;
      probed.product = {dtype, a_transposed, b_transposed};
      const std::vector<ProductRoute> candidates = candidate_routes(probed.product);
      probed.route = candidates.front();
      for (const ProductRoute& route : candidates) probed.seconds.emplace_back(route, 0.0);
      for (const ProductShape& shape : shapes) {
        if (shape.a_transposed != a_transposed || shape.b_transposed != b_transposed ||
            few_row_product(shape.m, a_transposed, b_transposed)) {
          continue;
        }
        ++probed.shapes;
        if (candidates.size() == 1) continue;
        const at::Tensor a = at::randn(a_transposed ? at::IntArrayRef{shape.k, shape.m}
                                                    : at::IntArrayRef{shape.m, shape.k})
                                 .to(dtype);
        const at::Tensor b = at::randn(b_transposed ? at::IntArrayRef{shape.n, shape.k}
                                                    : at::IntArrayRef{shape.k, shape.n})
                                 .to(dtype);
        for (auto& [route, seconds] : probed.seconds) {
          seconds += timer([&] { product_along(route, a, b, a_transposed, b_transposed); });
        }
      }
      if (probed.shapes == 0) continue;
      // The fastest of the others, when it beats the default by the margin.
      const double by_default = probed.seconds.front().second;
      double fastest = by_default;
      for (const auto& [route, seconds] : probed.seconds) {
        if (worth_switching(by_default, seconds) && seconds < fastest) {
          fastest = seconds;
          probed.route = route;
        }
      }
      probe.classes.push_back(probed);
    }
  }
  if (dtype == at::kBFloat16 && attention.seq > 0 && cpu_info().onednn_gemm_bf16 != nullptr) {
    // The default rule's way: as the bf16 x.w^T products were just routed.
    const ProductClass forward{at::kBFloat16, false, true};
    ProductRoute forward_route = default_route(forward);
    for (const ProbedClass& probed : probe.classes) {
      if (probed.product == forward) forward_route = probed.route;
    }
    probe.attention =
        probe_attention(attention, attention_tiles_in_bf16(forward_route.in_float32), timer);
  }
  return probe;
}

std::string product_probe_file(const std::string& cache_dir, const std::string& key) {
  // The file holds the whole key, which is compared.
  return (std::filesystem::path(cache_dir) / "products" / (hex64(fnv1a(key)) + ".txt")).string();
}

ProductProbe cached_product_probe(at::ScalarType dtype, const std::vector<ProductShape>& shapes,
                                  const AttentionShape& attention, const std::string& cache_dir) {
  namespace fs = std::filesystem;
  const std::string key = product_probe_key(dtype, shapes, attention);
  const fs::path path = product_probe_file(cache_dir, key);
  if (std::ifstream in{path}) {
    std::ostringstream text;
    text << in.rdbuf();
    try {
      ProductProbe cached = ProductProbe::from_text(text.str(), path.string());
      if (cached.key == key) {
        cached.from_cache = true;
        return cached;
      }
    } catch (const UserError& unreadable) {  // probed again and replaced
      std::fprintf(stderr, "strata: %s\n", unreadable.what());
    }
  }
  ProductProbe probe = probe_products(dtype, shapes, fastest_of_three_calls, attention);
  try {
    std::error_code error;  // write_file_atomically names a directory it cannot write in
    fs::create_directories(path.parent_path(), error);
    const std::string text = probe.to_text();
    write_file_atomically(path.string(), text.data(), text.size());
  } catch (const UserError& unwritable) {
    std::fprintf(stderr, "strata: %s; every run probes again\n", unwritable.what());
  }
  return probe;
}

ProductProbe cached_product_probe(at::ScalarType dtype, const std::vector<ProductShape>& shapes,
                                  const AttentionShape& attention) {
  std::string cache_dir;
  try {
    cache_dir = default_cache_dir();
  } catch (const UserError& no_cache) {
    std::fprintf(stderr, "strata: %s; the product probe runs every time\n", no_cache.what());
    return probe_products(dtype, shapes, fastest_of_three_calls, attention);
  }
  return cached_product_probe(dtype, shapes, attention, cache_dir);
}

}  // namespace strata
