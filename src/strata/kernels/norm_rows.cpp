// The bf16 norms (norm_rows.h): one row at a time in 16-lane vectors, rows in blocks of
// kNormRows on ATen's threads; the weight's and bias's gradients summed per block, then over
// the blocks in order.
#include "strata/kernels/norm_rows.h"

#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "strata/core/error.h"
#include "strata/kernels/thread_team.h"
#include "strata/kernels/vector_lanes.h"

namespace strata {
namespace {

using namespace lanes;

// Lanes [0, n) of x, the others 0.
[[gnu::always_inline]] inline void keep_first(Floats& x, int64_t n) {
  Ints index;
  for (int32_t i = 0; i < kLanes; ++i) index[i] = i;
  x = index < static_cast<int32_t>(n) ? x : Floats{};
}

// The lanes' sum, always in the same order.
[[gnu::always_inline]] inline float sum_lanes(const Floats& x) {
  float sum = 0;
  for (int64_t i = 0; i < kLanes; ++i) sum += x[i];
  return sum;
}

// The n (<= kLanes) values from x, shifted by -shift, the lanes past n 0.
[[gnu::always_inline]] inline void load_shifted(Floats& v, const c10::BFloat16* x, int64_t n,
                                                float shift) {
  load(v, x, n);
  v -= shift;
  if (n < kLanes) keep_first(v, n);
}

// Passes over one row, each a function of a vector's start and width (kLanes, or the tail's):
// called for whole vectors, whose constant width makes every copy one vector load, then for
// the tail.
struct ForwardRow {
  const c10::BFloat16* x;
  const float *w, *b;
  c10::BFloat16* y;
  float mean, rstd;

  [[gnu::always_inline]] void sum(Floats& acc, int64_t i, int64_t n) const {
    Floats v;
    load_shifted(v, x + i, n, 0.0f);
    acc += v;
  }
  [[gnu::always_inline]] void squares(Floats& acc, int64_t i, int64_t n) const {
    Floats v;
    load_shifted(v, x + i, n, mean);
    acc += v * v;
  }
  [[gnu::always_inline]] void normalize(int64_t i, int64_t n) const {
    Floats v, weight;
    load(v, x + i, n);
    load(weight, w + i, n);
    v = (v - mean) * rstd * weight;
    if (b != nullptr) {
      Floats bias;
      load(bias, b + i, n);
      v += bias;
    }
    store(y + i, v, n);
  }
};

[[gnu::always_inline]] inline void norm_forward_row_body(const c10::BFloat16* x, const float* w,
                                                         const float* b, int64_t C, float eps,
                                                         bool centered, c10::BFloat16* y,
                                                         float* stats) {
  ForwardRow row{x, w, b, y, 0.0f, 0.0f};
  const int64_t whole = C / kLanes * kLanes;
  if (centered) {
    Floats acc{};
    for (int64_t i = 0; i < whole; i += kLanes) row.sum(acc, i, kLanes);
    if (whole < C) row.sum(acc, whole, C - whole);
    row.mean = sum_lanes(acc) / static_cast<float>(C);
  }
  Floats acc{};
  for (int64_t i = 0; i < whole; i += kLanes) row.squares(acc, i, kLanes);
  if (whole < C) row.squares(acc, whole, C - whole);
  row.rstd = 1.0f / std::sqrt(sum_lanes(acc) / static_cast<float>(C) + eps);
  for (int64_t i = 0; i < whole; i += kLanes) row.normalize(i, kLanes);
  if (whole < C) row.normalize(whole, C - whole);
  stats[0] = row.mean;
  stats[1] = row.rstd;
}

struct BackwardRow {
  const c10::BFloat16 *x, *dy;
  const float* w;
  float mean, rstd;

  // xhat and g = dy w of n values at i (0 past n).
  [[gnu::always_inline]] void read(Floats& xhat, Floats& grad, Floats& g, int64_t i,
                                   int64_t n) const {
    Floats weight;
    load_shifted(xhat, x + i, n, mean);
    xhat *= rstd;
    load(grad, dy + i, n);
    load(weight, w + i, n);
    g = grad * weight;
  }
  // The row's sums of g and g xhat, and its terms of dw and db.
  [[gnu::always_inline]] void sums(Floats& sum_g, Floats& sum_gx, float* dw, float* db, int64_t i,
                                   int64_t n) const {
    Floats xhat, grad, g, dw_lanes, db_lanes;
    read(xhat, grad, g, i, n);
    sum_g += g;
    sum_gx += g * xhat;
    load(dw_lanes, dw + i, n);
    load(db_lanes, db + i, n);
    dw_lanes += grad * xhat;
    db_lanes += grad;
    std::memcpy(dw + i, &dw_lanes, n * sizeof(float));
    std::memcpy(db + i, &db_lanes, n * sizeof(float));
  }
  [[gnu::always_inline]] void input_grad(c10::BFloat16* dx, float mean_g, float mean_gx, int64_t i,
                                         int64_t n) const {
    Floats xhat, grad, g;
    read(xhat, grad, g, i, n);
    const Floats d = rstd * (g - mean_g - xhat * mean_gx);
    store(dx + i, d, n);
  }
};

[[gnu::always_inline]] inline void norm_backward_row_body(const c10::BFloat16* x,
                                                          const c10::BFloat16* dy, const float* w,
                                                          const float* stats, int64_t C,
                                                          bool centered, c10::BFloat16* dx,
                                                          float* dw, float* db) {
  const BackwardRow row{x, dy, w, stats[0], stats[1]};
  const int64_t whole = C / kLanes * kLanes;
  Floats sum_g{}, sum_gx{};
  for (int64_t i = 0; i < whole; i += kLanes) row.sums(sum_g, sum_gx, dw, db, i, kLanes);
  if (whole < C) row.sums(sum_g, sum_gx, dw, db, whole, C - whole);
  const float mean_g = centered ? sum_lanes(sum_g) / static_cast<float>(C) : 0.0f;
  const float mean_gx = sum_lanes(sum_gx) / static_cast<float>(C);
  for (int64_t i = 0; i < whole; i += kLanes) row.input_grad(dx, mean_g, mean_gx, i, kLanes);
  if (whole < C) row.input_grad(dx, mean_g, mean_gx, whole, C - whole);
}

STRATA_VECTOR_PATHS(void, norm_forward_row,
                    (const c10::BFloat16* x, const float* w, const float* b, int64_t C, float eps,
                     bool centered, c10::BFloat16* y, float* stats),
                    (x, w, b, C, eps, centered, y, stats))
STRATA_VECTOR_PATHS(void, norm_backward_row,
                    (const c10::BFloat16* x, const c10::BFloat16* dy, const float* w,
                     const float* stats, int64_t C, bool centered, c10::BFloat16* dx, float* dw,
                     float* db),
                    (x, dy, w, stats, C, centered, dx, dw, db))

// A (C) parameter as contiguous float32; an empty one (no bias) undefined.
at::Tensor as_float(const at::Tensor& p) {
  return p.numel() > 0 ? p.to(at::kFloat).contiguous() : at::Tensor();
}

// Columns per task when the blocks' sums of the weight gradients are added up.
constexpr int64_t kNormColumns = 256;

struct NormFunction : torch::autograd::Function<NormFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const at::Tensor& weight, const at::Tensor& bias, double eps,
                            bool centered) {
    RECORD_FUNCTION("strata::norm_forward", std::vector<c10::IValue>({input}));
    const at::Tensor x = input.contiguous();
    const int64_t C = x.size(-1), rows = x.numel() / std::max<int64_t>(C, 1);
    const at::Tensor w = as_float(weight), b = as_float(bias);
    at::Tensor y = at::empty_like(x);
    at::Tensor stats = at::empty({rows, 2}, x.options().dtype(at::kFloat));  // mean, rstd
    const auto* in = x.data_ptr<c10::BFloat16>();
    auto* out = y.data_ptr<c10::BFloat16>();
    const float* b_data = b.defined() ? b.data_ptr<float>() : nullptr;
    for_each_chunk(rows, kNormRows, [&](int64_t, int64_t first, int64_t count) {
      for (int64_t r = first; r < first + count; ++r) {
        norm_forward_row(in + r * C, w.data_ptr<float>(), b_data, C, static_cast<float>(eps),
                         centered, out + r * C, stats.data_ptr<float>() + 2 * r);
      }
    });
    ctx->save_for_backward({x, weight, bias, stats});
    ctx->saved_data["centered"] = centered;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    // The backward runs on raw memory: a gradient of it would silently come out as 0.
    STRATA_CHECK(!at::GradMode::is_enabled(),
                 "the bf16 norms have no double backward (backward with create_graph)");
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &bias = saved[2], &stats = saved[3];
    const bool centered = ctx->saved_data["centered"].toBool();
    const at::Tensor dy = grads[0].to(x.scalar_type()).contiguous();
    const int64_t C = x.size(-1), rows = x.numel() / std::max<int64_t>(C, 1);
    const int64_t blocks = (rows + kNormRows - 1) / kNormRows;
    const at::Tensor w = as_float(weight);
    at::Tensor dx = at::empty_like(x);
    // Per block: its rows' sums of dy xhat (dw) and dy (db).
    at::Tensor partial = at::zeros({blocks, 2, C}, x.options().dtype(at::kFloat));
    const auto *in = x.data_ptr<c10::BFloat16>(), *grad = dy.data_ptr<c10::BFloat16>();
    auto* out = dx.data_ptr<c10::BFloat16>();
    for_each_chunk(rows, kNormRows, [&](int64_t block, int64_t first, int64_t count) {
      float* dw = partial.data_ptr<float>() + block * 2 * C;
      for (int64_t r = first; r < first + count; ++r) {
        norm_backward_row(in + r * C, grad + r * C, w.data_ptr<float>(),
                          stats.data_ptr<float>() + 2 * r, C, centered, out + r * C, dw, dw + C);
      }
    });
    // The blocks in order for each column, columns split over the threads (ATen's sum over
    // dim 0 would pick its own order by the thread count).
    at::Tensor sums = at::zeros({2, C}, partial.options());
    const float* parts = partial.data_ptr<float>();
    float* total = sums.data_ptr<float>();
    for_each_chunk(2 * C, kNormColumns, [&](int64_t, int64_t first, int64_t count) {
      for (int64_t block = 0; block < blocks; ++block) {
        const float* part = parts + block * 2 * C;
        for (int64_t c = first; c < first + count; ++c) total[c] += part[c];
      }
    });
    const at::Tensor dweight = sums[0].to(weight.scalar_type());
    const at::Tensor dbias = bias.numel() > 0 ? sums[1].to(bias.scalar_type()) : at::Tensor();
    return {dx, dweight, dbias, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool norm_rows_takes(const at::Tensor& x) {
  return x.is_cpu() && x.scalar_type() == at::kBFloat16 && x.dim() >= 1 && x.size(-1) > 0;
}

at::Tensor norm_rows(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                     double eps, bool centered) {
  STRATA_CHECK(norm_rows_takes(x), "norm_rows takes CPU bf16 activations, got ", x.scalar_type());
  const int64_t C = x.size(-1);
  STRATA_CHECK(weight.dim() == 1 && weight.size(0) == C &&
                   (!bias.defined() || bias.sizes() == weight.sizes()),
               "norm weight ", weight.sizes(),
               " (and bias, if any) do not match activations of width ", C);
  // libtorch 1.13's custom functions take no undefined tensor: no bias is an empty one.
  const at::Tensor no_bias = at::empty({0}, weight.options());
  return NormFunction::apply(x, weight, bias.defined() ? bias : no_bias, eps, centered);
}

}  // namespace strata
