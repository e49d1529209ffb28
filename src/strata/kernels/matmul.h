// The one place a matrix product of the model picks its kernel (the linear layers' forward and
// backward, the matmul-peak probe). A CPU product x W^T of at most kSkinnyRows rows of float32
// or bf16 (a serving step's decode rows, a small batch) goes to the few-row kernel
// (skinny_gemm.h), which streams the weight once for all rows (bf16 as stored) and gives each
// row the same bits whatever other rows share the call. Every other product belongs to a class,
// its dtype and operand layout (ProductClass), and takes the route chosen for that class: by
// the run's timed probe (product_probe.h), which times the candidates (candidate_routes) on the
// shapes the run multiplies, or else the default (default_route). The candidates: oneDNN's
// sgemm through tile_gemm.h (when libtorch brought oneDNN, cpu.h), ATen's matmul (Debian's
// OpenBLAS for float32, which may not know the CPU; oneDNN's bf16 GEMM for bf16, fast where the
// CPU has a bf16 dot product and slow on some that do not), and for 16-bit operands their
// float32 copies multiplied and rounded back. Other dtypes and devices use ATen's matmul. Every
// product counts the path it took (product_count).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

enum class ProductPath { few_rows, onednn_tile, aten };
constexpr int kProductPaths = 3;

const char* product_path_name(ProductPath path);

struct ProductRoute {
  ProductPath path = ProductPath::aten;
  bool in_float32 = false;  // 16-bit operands multiplied in float32, the result rounded back

  bool operator==(const ProductRoute& other) const {
    return path == other.path && in_float32 == other.in_float32;
  }
};

// "oneDNN sgemm", "ATen matmul in float32", ...
std::string route_name(const ProductRoute& route);

// Products routed as one: CPU operands of one dtype in one layout (the forward's x W^T is
// {dtype, false, true}, an input gradient's dy W {dtype, false, false}, a weight gradient's
// dy^T x {dtype, true, false}).
struct ProductClass {
  at::ScalarType dtype = at::kFloat;
  bool a_transposed = false;
  bool b_transposed = true;

  bool operator==(const ProductClass& other) const {
    return dtype == other.dtype && a_transposed == other.a_transposed &&
           b_transposed == other.b_transposed;
  }
};

// "float32", "bfloat16", "float16", else ATen's name of the dtype.
std::string dtype_name(at::ScalarType dtype);

// "float32 x.w^T", "bfloat16 dy.w", "bfloat16 dy^T.x": the dtype and the layout's role.
std::string class_name(const ProductClass& product);

// The routes a class may take, the default first; one route means there is nothing to choose.
// float32: oneDNN's sgemm (where loaded), ATen. bf16: the same in float32, ATen's bf16. float16:
// float32 only (libtorch 1.13 has no CPU float16 GEMM). Other dtypes: ATen.
std::vector<ProductRoute> candidate_routes(const ProductClass& product);

// The route of a class no probe has chosen for: float32 and float16 oneDNN's sgemm where it is
// loaded, bf16 ATen's bf16 GEMM where the CPU has AMX-BF16 and oneDNN's float32 sgemm
// elsewhere (the rule before the probe: without AMX, one Intel host's oneDNN bf16 GEMM ran at a
// third of its float32 rate).
ProductRoute default_route(const ProductClass& product);

// The routes chosen for these classes replace their defaults, in this process, until the next
// call (an empty list restores the defaults). Call it before products run: the run's probe
// does, on every rank alike (product_probe.h).
void use_product_routes(const std::vector<std::pair<ProductClass, ProductRoute>>& routes);

// The route a class takes now: the chosen one, else its default.
ProductRoute class_route(const ProductClass& product);

// a (M, K) @ op(b), op(b) (K, N): b is (N, K) when b_transposed, else (K, N); a is given as
// (K, M) when a_transposed. Row-major matrices; the result is (M, N) of a's dtype.
at::Tensor routed_product(const at::Tensor& a, const at::Tensor& b, bool a_transposed,
                          bool b_transposed);

// out += a @ op(b) (operands as routed_product's; out (M, N), contiguous): on the oneDNN sgemm
// route into a float32 out, the product adds itself into out (beta = 1) and no (M, N) product
// is built; elsewhere the product is built and added. A deferred weight gradient accumulates
// into .grad this way: the zero-bubble schedules' W would otherwise hold a second weight-sized
// tensor at their peak.
void routed_product_add(at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                        bool a_transposed, bool b_transposed);

// The product along `route` (the probe times each candidate with it); routed_product is this
// along route_product's route, counted.
at::Tensor product_along(const ProductRoute& route, const at::Tensor& a, const at::Tensor& b,
                         bool a_transposed, bool b_transposed);

// Whether a product of m rows in this layout is one the few-row kernel takes (x W^T of at most
// kSkinnyRows rows; float32 and 16-bit operands): no probe routes it.
bool few_row_product(int64_t m, bool a_transposed, bool b_transposed);

// The path routed_product takes for these operands (nothing is multiplied).
ProductRoute route_product(const at::Tensor& a, const at::Tensor& b, bool a_transposed,
                           bool b_transposed);

// How many products took `path` in this process so far (all threads).
int64_t product_count(ProductPath path);

}  // namespace strata
