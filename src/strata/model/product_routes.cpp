// The run's products and their routes (product_routes.h).
#include "strata/model/product_routes.h"

#include <algorithm>

#include "strata/core/error.h"
#include "strata/core/precision.h"

namespace strata {
namespace {

struct LinearShape {
  int64_t in, out;
};

// One rank's linear layers: (in, out) of its tp shard, and the rows each multiplies.
std::vector<std::pair<LinearShape, int64_t>> rank_linears(const Config& config, int64_t rows) {
  const ModelConfig& model = config.model;
  const int64_t tp = config.parallel.tp, d = model.d_model, hd = model.head_dim();
  std::vector<std::pair<LinearShape, int64_t>> linears = {
      {{d, model.n_heads * hd / tp}, rows},     // q
      {{d, model.kv_heads() * hd / tp}, rows},  // k, v
      {{model.n_heads * hd / tp, d}, rows},     // the output projection
      {{d, model.vocab_size / tp}, rows},       // the head
  };
  bool dense = false, experts = false;
  for (int64_t layer = 0; layer < model.n_layers; ++layer) {
    (model.is_moe_layer(layer) ? experts : dense) = true;
  }
  if (dense) {
    linears.push_back({{d, model.ff_dim() / tp}, rows});
    linears.push_back({{model.ff_dim() / tp, d}, rows});
  }
  if (experts) {
    // Each expert's rows on average: every token goes to top_k of num_experts.
    const int64_t per_expert =
        std::max<int64_t>(1, rows * model.moe.top_k / std::max<int64_t>(1, model.moe.num_experts));
    linears.push_back({{d, model.ff_dim() / tp}, per_expert});
    linears.push_back({{model.ff_dim() / tp, d}, per_expert});
  }
  return linears;
}

void add(std::vector<ProductShape>& shapes, const ProductShape& shape) {
  if (shape.m > 0 && shape.n > 0 && shape.k > 0 &&
      std::find(shapes.begin(), shapes.end(), shape) == shapes.end()) {
    shapes.push_back(shape);
  }
}

// Rank 0's probe as text on every rank.
std::string broadcast_text(Comm& world, const std::string& text) {
  at::Tensor size = at::tensor({static_cast<int64_t>(text.size())}, at::kLong);
  world.broadcast(size, 0);
  at::Tensor bytes = at::empty({size.item<int64_t>()}, at::kByte);
  if (world.rank() == 0) std::copy(text.begin(), text.end(), bytes.data_ptr<uint8_t>());
  world.broadcast(bytes, 0);
  const auto* data = reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>());
  return std::string(data, data + bytes.numel());
}

// One rank's attention over `rows` rows, as the blockwise kernel sees it: its tp share of the
// query heads and of the kv heads. Where tp does not divide the kv heads, every rank holds all
// of them and hands the kernel one per query head (GPT::expand_kv).
AttentionShape rank_attention(const Config& config, int64_t rows) {
  const ModelConfig& model = config.model;
  if (model.attention != AttentionKernel::blockwise) return {};
  const int64_t tp = config.parallel.tp, heads = model.n_heads / tp, kv = model.kv_heads();
  return {heads, kv % tp == 0 ? kv / tp : heads, rows, model.head_dim()};
}

}  // namespace

RunProducts training_products(const Config& config) {
  const int64_t seq = config.model.seq_len / std::max<int64_t>(1, config.parallel.cp);
  RunProducts run;
  for (const auto& [linear, m] : rank_linears(config, config.parallel.micro_batch * seq)) {
    add(run.shapes, {m, linear.out, linear.in, false, true});   // y = x W^T
    add(run.shapes, {m, linear.in, linear.out, false, false});  // dx = dy W
    add(run.shapes, {linear.out, linear.in, m, true, false});   // dW = dy^T x
  }
  run.attention = rank_attention(config, seq);
  return run;
}

RunProducts serving_products(const Config& config) {
  RunProducts run;
  for (const auto& [linear, m] : rank_linears(config, config.serve.max_batch_tokens)) {
    add(run.shapes, {m, linear.out, linear.in, false, true});
  }
  run.attention =
      rank_attention(config, std::min(config.serve.max_batch_tokens, config.model.seq_len));
  return run;
}

ProductProbe choose_product_routes(Comm& world, const Config& config, const RunProducts& run) {
  const at::ScalarType dtype = compute_dtype(config.train.precision);
  std::string text;
  if (world.rank() == 0) {
    text = cached_product_probe(dtype, run.shapes, run.attention).to_text();
  }
  ProductProbe probe = ProductProbe::from_text(broadcast_text(world, text), "rank 0's probe");
  probe.use();
  return probe;
}

}  // namespace strata
