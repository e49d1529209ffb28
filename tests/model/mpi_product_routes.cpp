// The run's products and their routes (model/product_routes.h): every rank takes rank 0's probe,
// whatever its own cache holds; the training products list each linear layer's tp shard in the
// three layouts of a step, and serving's the forwards of a prefill chunk.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "strata/dist/comm.h"
#include "strata/kernels/tile_gemm.h"
#include "strata/model/product_routes.h"
#include "test_configs.h"
#include "test_support.h"

namespace strata {
namespace {

bool lists(const std::vector<ProductShape>& shapes, const ProductShape& shape) {
  return std::find(shapes.begin(), shapes.end(), shape) != shapes.end();
}

// $STRATA_CACHE_DIR for one scope.
class CacheDir {
 public:
  explicit CacheDir(const std::string& dir) {
    if (const char* old = std::getenv("STRATA_CACHE_DIR")) previous_ = old;
    setenv("STRATA_CACHE_DIR", dir.c_str(), 1);
  }
  ~CacheDir() {
    if (previous_.empty()) {
      unsetenv("STRATA_CACHE_DIR");
    } else {
      setenv("STRATA_CACHE_DIR", previous_.c_str(), 1);
    }
  }

 private:
  std::string previous_;
};

// Each rank's cache holds a different probe of the run's shapes: rank 0's routes the float32
// forward to ATen in 0.125 s and multiplies attention tiles as bf16, the others' take the default
// in 7 s and float32 copies. Every rank installs rank 0's.
TEST(ProductRoutes, EveryRankTakesRankZerosProbe) {
  Comm world = Comm::world(120);
  Config config = testing::tiny_training_run(2, 4, 2);
  const RunProducts run = training_products(config);
  testing::TempDir dir;
  const CacheDir cache(dir.path());
  const ProductClass forward{at::kFloat, false, true};
  ProductProbe planted;
  planted.key = product_probe_key(at::kFloat, run.shapes, run.attention);
  ProbedClass probed;
  probed.product = forward;
  probed.shapes = 1;
  const bool rank0 = world.rank() == 0;
  probed.route = rank0 ? ProductRoute{ProductPath::aten, false} : default_route(forward);
  probed.seconds = {{probed.route, rank0 ? 0.125 : 7.0}};
  planted.classes.push_back(probed);
  planted.attention = ProbedAttention{run.attention, /*in_bf16=*/rank0, 1.0, 2.0};
  const std::string file = product_probe_file(dir.path(), planted.key);
  std::filesystem::create_directories(std::filesystem::path(file).parent_path());
  std::ofstream(file) << planted.to_text();

  const ProductProbe chosen = choose_product_routes(world, config, run);
  ASSERT_EQ(chosen.classes.size(), 1u);
  EXPECT_EQ(chosen.classes[0].seconds[0].second, 0.125);
  EXPECT_EQ(class_route(forward), (ProductRoute{ProductPath::aten, false}));
  EXPECT_EQ(chosen_attention_tiles(), std::optional<bool>(true)) << "rank 0's attention tiles";
  ProductProbe{}.use();
}

TEST(ProductRoutes, ListTheTensorParallelShardsOfEveryLayer) {
  Config config = testing::tiny_training_run(2, 4, 2);  // d 32, 4 heads, 32 tokens, vocab 256
  config.parallel.tp = 2;
  const int64_t rows = 2 * 32, d = 32;
  const std::vector<ProductShape> shapes = training_products(config).shapes;
  EXPECT_TRUE(lists(shapes, {rows, d / 2, d, false, true}));       // q's shard
  EXPECT_TRUE(lists(shapes, {rows, d, d / 2, false, true}));       // the output projection's
  EXPECT_TRUE(lists(shapes, {rows, 4 * d / 2, d, false, true}));   // the MLP's up
  EXPECT_TRUE(lists(shapes, {rows, d, 4 * d / 2, false, true}));   // and down
  EXPECT_TRUE(lists(shapes, {rows, 256 / 2, d, false, true}));     // the head
  EXPECT_TRUE(lists(shapes, {rows, d, 4 * d / 2, false, false}));  // dx of the up-projection
  EXPECT_TRUE(lists(shapes, {4 * d / 2, d, rows, true, false}));   // its dW
  for (const ProductShape& shape : shapes) {
    EXPECT_EQ(std::count(shapes.begin(), shapes.end(), shape), 1) << "listed twice";
  }
  config.serve.max_batch_tokens = 96;
  for (const ProductShape& shape : serving_products(config).shapes) {
    EXPECT_EQ(shape.m, 96);
    EXPECT_TRUE(!shape.a_transposed && shape.b_transposed);
  }
  EXPECT_TRUE(lists(serving_products(config).shapes, {96, 256 / 2, d, false, true}));
}

// The attention the probe times is the one the blockwise kernel gets on a rank: its share of the
// heads over seq_len / cp rows (serving: a prefill chunk); with kv heads tp does not divide, one
// kv head per query head (GPT::expand_kv), so the kernel's kv heads divide its query heads.
TEST(ProductRoutes, TimeTheAttentionTheKernelGetsOnARank) {
  Config config = testing::tiny_training_run(2, 4, 2);  // d 32, 4 heads of 8, 32 tokens
  config.parallel.tp = 2;
  const auto expect = [](const AttentionShape& got, AttentionShape want) {
    EXPECT_EQ(got.heads, want.heads);
    EXPECT_EQ(got.kv_heads, want.kv_heads);
    EXPECT_EQ(got.seq, want.seq);
    EXPECT_EQ(got.head_dim, want.head_dim);
  };
  expect(training_products(config).attention, {2, 2, 32, 8});
  config.model.n_kv_heads = 2;
  expect(training_products(config).attention, {2, 1, 32, 8});
  config.model.n_kv_heads = 1;  // replicated on both ranks
  expect(training_products(config).attention, {2, 2, 32, 8});
  config.parallel.cp = 2;
  expect(training_products(config).attention, {2, 2, 16, 8});
  config.parallel.cp = 1;
  config.serve.max_batch_tokens = 24;
  expect(serving_products(config).attention, {2, 2, 24, 8});
  config.model.attention = AttentionKernel::eager;
  EXPECT_EQ(training_products(config).attention.seq, 0);
}

}  // namespace
}  // namespace strata
