// The product routing (matmul.h): route_product decides, routed_product multiplies as decided.
#include "strata/kernels/matmul.h"

#include <ATen/record_function.h>

#include <atomic>

#include "strata/kernels/cpu.h"
#include "strata/kernels/skinny_gemm.h"
#include "strata/kernels/tile_gemm.h"

namespace strata {
namespace {

std::atomic<int64_t> taken[kProductPaths];

// The chosen routes (use_product_routes), by dtype (float32, bf16, float16) and layout (the two
// transposes): 0 for none (the default), else 1 + 2 * path + in_float32. Atomic: a serving engine's
// threads read them while nothing writes.
constexpr int kDtypes = 3, kLayouts = 4;
std::atomic<int> chosen[kDtypes][kLayouts] = {};

int dtype_index(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return 0;
    case at::kBFloat16:
      return 1;
    case at::kHalf:
      return 2;
    default:
      return -1;
  }
}

std::atomic<int>* chosen_slot(const ProductClass& product) {
  const int dtype = dtype_index(product.dtype);
  if (dtype < 0) return nullptr;
  return &chosen[dtype][2 * product.a_transposed + product.b_transposed];
}

bool sixteen_bit(at::ScalarType dtype) { return dtype == at::kBFloat16 || dtype == at::kHalf; }

ProductPath float32_path() {
  return cpu_info().onednn_sgemm != nullptr ? ProductPath::onednn_tile : ProductPath::aten;
}

// out (m x n, contiguous float32) = a b + beta out on oneDNN's sgemm, a and b contiguous float32
// (route_product checked their inner sizes) in routed_product's layout.
void onednn_product(const at::Tensor& a, const at::Tensor& b, bool a_transposed, bool b_transposed,
                    float beta, at::Tensor& out) {
  tile_gemm(out.size(0), out.size(1), a.size(a_transposed ? 0 : 1), 1.0f,
            TileOperand<float>{a.data_ptr<float>(), a.size(1), a_transposed},
            TileOperand<float>{b.data_ptr<float>(), b.size(1), b_transposed}, beta,
            out.data_ptr<float>(), out.size(1), TileGemmBackend::onednn);
}

// CPU operands whose inner sizes agree (route_product checked them), along `path`: float32 for
// the raw-pointer paths (bf16 too for the few-row kernel), any dtype for ATen's.
at::Tensor multiply(ProductPath path, const at::Tensor& a, const at::Tensor& b, bool a_transposed,
                    bool b_transposed) {
  if (path == ProductPath::aten) {
    return at::matmul(a_transposed ? a.t() : a, b_transposed ? b.t() : b);
  }
  const int64_t m = a.size(a_transposed ? 1 : 0), k = a.size(a_transposed ? 0 : 1);
  const int64_t n = b.size(b_transposed ? 0 : 1);
  const at::Tensor ac = a.contiguous(), bc = b.contiguous();
  at::Tensor out = at::empty({m, n}, ac.options().dtype(at::kFloat));
  if (path == ProductPath::few_rows) {
    if (ac.scalar_type() == at::kBFloat16) {  // read as stored, widened in the registers
      skinny_gemm_nt(m, n, k, ac.data_ptr<at::BFloat16>(), k, bc.data_ptr<at::BFloat16>(), k,
                     out.data_ptr<float>(), n);
    } else {
      skinny_gemm_nt(m, n, k, ac.data_ptr<float>(), k, bc.data_ptr<float>(), k,
                     out.data_ptr<float>(), n);
    }
    return out;
  }
  onednn_product(ac, bc, a_transposed, b_transposed, 0.0f, out);
  return out;
}

}  // namespace

const char* product_path_name(ProductPath path) {
  switch (path) {
    case ProductPath::few_rows:
      return "few-row kernel";
    case ProductPath::onednn_tile:
      return "oneDNN sgemm";
    case ProductPath::aten:
      return "ATen matmul";
  }
  return "ATen matmul";
}

std::string route_name(const ProductRoute& route) {
  return std::string(product_path_name(route.path)) + (route.in_float32 ? " in float32" : "");
}

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "float32";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    default:
      return c10::toString(dtype);
  }
}

std::string class_name(const ProductClass& product) {
  const char* layout = product.a_transposed ? (product.b_transposed ? "a^T.b^T" : "dy^T.x")
                                            : (product.b_transposed ? "x.w^T" : "dy.w");
  return dtype_name(product.dtype) + " " + layout;
}

std::vector<ProductRoute> candidate_routes(const ProductClass& product) {
  const ProductPath f32 = float32_path();
  switch (product.dtype) {
    case at::kFloat:
      if (f32 == ProductPath::aten) return {{ProductPath::aten, false}};
      return {{f32, false}, {ProductPath::aten, false}};
    case at::kBFloat16:
      if (cpu_info().amx_bf16) return {{ProductPath::aten, false}, {f32, true}};
      return {{f32, true}, {ProductPath::aten, false}};
    case at::kHalf:
      return {{f32, true}};
    default:
      return {{ProductPath::aten, false}};
  }
}

ProductRoute default_route(const ProductClass& product) {
  return candidate_routes(product).front();
}

void use_product_routes(const std::vector<std::pair<ProductClass, ProductRoute>>& routes) {
  for (auto& by_dtype : chosen) {
    for (auto& slot : by_dtype) slot.store(0);
  }
  for (const auto& [product, route] : routes) {
    if (std::atomic<int>* slot = chosen_slot(product)) {
      slot->store(1 + 2 * static_cast<int>(route.path) + route.in_float32);
    }
  }
}

ProductRoute class_route(const ProductClass& product) {
  const std::atomic<int>* slot = chosen_slot(product);
  const int code = slot != nullptr ? slot->load(std::memory_order_relaxed) : 0;
  if (code == 0) return default_route(product);
  return {static_cast<ProductPath>((code - 1) / 2), ((code - 1) & 1) != 0};
}

bool few_row_product(int64_t m, bool a_transposed, bool b_transposed) {
  return !a_transposed && b_transposed && m <= kSkinnyRows;
}

ProductRoute route_product(const at::Tensor& a, const at::Tensor& b, bool a_transposed,
                           bool b_transposed) {
  const at::ScalarType dtype = a.scalar_type();
  const int64_t m = a.size(a_transposed ? 1 : 0), k = a.size(a_transposed ? 0 : 1);
  // Other devices, mixed dtypes and inner sizes that disagree go to ATen's matmul, which
  // multiplies on the device or names the mismatch.
  if (!a.is_cpu() || !b.is_cpu() || b.scalar_type() != dtype || b.size(b_transposed ? 1 : 0) != k) {
    return {ProductPath::aten, false};
  }
  if (few_row_product(m, a_transposed, b_transposed) &&
      (dtype == at::kFloat || sixteen_bit(dtype))) {
    // bf16 rows meet in AVX512-BF16's dot product where the CPU has it; otherwise the kernel
    // widens 16-bit operands to float32 (in its registers for bf16, as copies for fp16).
    return {ProductPath::few_rows,
            sixteen_bit(dtype) && !(dtype == at::kBFloat16 && cpu_info().bf16_dot)};
  }
  ProductRoute route = class_route({dtype, a_transposed, b_transposed});
  if (a.numel() == 0 || b.numel() == 0) route.path = ProductPath::aten;
  return route;
}

at::Tensor product_along(const ProductRoute& route, const at::Tensor& a, const at::Tensor& b,
                         bool a_transposed, bool b_transposed) {
  const at::ScalarType dtype = a.scalar_type();
  // bf16 rows take the few-row kernel as they are; the other 16-bit routes widen copies.
  const bool widen =
      route.in_float32 && !(route.path == ProductPath::few_rows && dtype == at::kBFloat16);
  if (!widen) {
    const at::Tensor out = multiply(route.path, a, b, a_transposed, b_transposed);
    return out.scalar_type() == dtype ? out : out.to(dtype);
  }
  return multiply(route.path, a.to(at::kFloat), b.to(at::kFloat), a_transposed, b_transposed)
      .to(dtype);
}

at::Tensor routed_product(const at::Tensor& a, const at::Tensor& b, bool a_transposed,
                          bool b_transposed) {
  RECORD_FUNCTION("strata::product", std::vector<c10::IValue>({a, b}));
  const ProductRoute route = route_product(a, b, a_transposed, b_transposed);
  taken[static_cast<int>(route.path)].fetch_add(1, std::memory_order_relaxed);
  return product_along(route, a, b, a_transposed, b_transposed);
}

void routed_product_add(at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                        bool a_transposed, bool b_transposed) {
  const ProductRoute route = route_product(a, b, a_transposed, b_transposed);
  const int64_t m = a.size(a_transposed ? 1 : 0), n = b.size(b_transposed ? 0 : 1);
  const bool in_place = route.path == ProductPath::onednn_tile && out.scalar_type() == at::kFloat &&
                        out.is_cpu() && out.is_contiguous() && out.dim() == 2 && out.size(0) == m &&
                        out.size(1) == n;
  if (!in_place) {
    out.add_(routed_product(a, b, a_transposed, b_transposed));
    return;
  }
  taken[static_cast<int>(route.path)].fetch_add(1, std::memory_order_relaxed);
  RECORD_FUNCTION("strata::product_add", std::vector<c10::IValue>({a, b}));
  // 16-bit operands on this route are multiplied as float32 copies (route.in_float32).
  onednn_product(a.to(at::kFloat).contiguous(), b.to(at::kFloat).contiguous(), a_transposed,
                 b_transposed, 1.0f, out);
}

int64_t product_count(ProductPath path) {
  return taken[static_cast<int>(path)].load(std::memory_order_relaxed);
}

}  // namespace strata
