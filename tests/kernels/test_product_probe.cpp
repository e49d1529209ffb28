// The product probe (kernels/product_probe.h): the fastest candidate takes a class only when it
// beats the default by 10% and the default takes 1 ms or more (a scripted timer stands for the
// clock); few-row products are not
// timed; bf16 attention's tiles are timed both ways and chosen by the same margins; the probe
// reads back from its text; the cache is read when its key matches, replaced when it cannot be
// read, and the key changes with the dtype, the shapes, the attention and the thread count.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <filesystem>
#include <fstream>

#include "strata/core/error.h"
#include "strata/kernels/cpu.h"
#include "strata/kernels/product_probe.h"
#include "strata/kernels/skinny_gemm.h"
#include "strata/kernels/tile_gemm.h"
#include "test_support.h"

namespace strata {
namespace {

// Gives the scripted seconds in turn, one per timed call (it runs nothing).
ProductTimer scripted(std::vector<double> seconds, size_t* calls) {
  return [seconds, calls](const std::function<void()>&) { return seconds.at((*calls)++); };
}

const std::vector<ProductShape> kForwards = {{64, 32, 16, false, true}, {64, 48, 16, false, true}};

const ProbedClass& only_class(const ProductProbe& probe) {
  EXPECT_EQ(probe.classes.size(), 1u);
  return probe.classes.front();
}

TEST(ProductProbe, TheFastestTakesAClassOnlyByAMargin) {
  const std::vector<ProductRoute> candidates = candidate_routes({at::kBFloat16, false, true});
  ASSERT_EQ(candidates.size(), 2u);
  size_t calls = 0;
  // Per shape: the default, then the other. The other's 0.6 + 0.6 against 1.0 + 1.0 wins.
  ProductProbe probe = probe_products(at::kBFloat16, kForwards, scripted({1, 0.6, 1, 0.6}, &calls));
  EXPECT_EQ(calls, 4u);
  EXPECT_EQ(only_class(probe).route, candidates[1]);
  EXPECT_EQ(only_class(probe).shapes, 2);
  EXPECT_DOUBLE_EQ(only_class(probe).seconds[0].second, 2.0);
  EXPECT_DOUBLE_EQ(only_class(probe).seconds[1].second, 1.2);
  // 0.95 of the default's time is within the noise: the default stays.
  calls = 0;
  probe = probe_products(at::kBFloat16, kForwards, scripted({1, 0.95, 1, 0.95}, &calls));
  EXPECT_EQ(only_class(probe).route, candidates[0]);
  // Under a millisecond in all on the default: not worth choosing, however much faster.
  calls = 0;
  probe = probe_products(at::kBFloat16, kForwards, scripted({4e-4, 1e-4, 4e-4, 1e-4}, &calls));
  EXPECT_EQ(only_class(probe).route, candidates[0]);
  EXPECT_DOUBLE_EQ(only_class(probe).seconds[1].second, 2e-4);
}

TEST(ProductProbe, TimesEachClassOfTheShapesButNotTheFewRowOnes) {
  size_t calls = 0;
  const std::vector<ProductShape> shapes = {{kSkinnyRows, 32, 16, false, true},  // few rows
                                            {64, 16, 32, false, false},          // dy w
                                            {32, 16, 64, true, false}};          // dy^T x
  const ProductProbe probe =
      probe_products(at::kFloat, shapes, scripted(std::vector<double>(8, 1.0), &calls));
  const size_t candidates = candidate_routes({at::kFloat, false, false}).size();
  EXPECT_EQ(calls, candidates > 1 ? 2 * candidates : 0u);
  ASSERT_EQ(probe.classes.size(), 2u);
  EXPECT_EQ(probe.classes[0].product, (ProductClass{at::kFloat, false, false}));
  EXPECT_EQ(probe.classes[1].product, (ProductClass{at::kFloat, true, false}));
}

const AttentionShape kAttention{4, 2, 40, 16};

// Where oneDNN's bf16 GEMM is loaded, a bf16 probe times attention after the classes: the
// default rule's way first (as the bf16 x.w^T products were just routed), then the other,
// which takes it by the same margins as a class.
TEST(ProductProbe, Bf16AttentionTilesTakeTheFasterWayByAMargin) {
  const bool loaded = cpu_info().onednn_gemm_bf16 != nullptr;
  const auto probe_with = [](std::vector<double> attention_seconds, size_t* calls) {
    std::vector<double> seconds = {1, 0.6, 1, 0.6};  // the x.w^T class: the other route wins
    seconds.insert(seconds.end(), attention_seconds.begin(), attention_seconds.end());
    return probe_products(at::kBFloat16, kForwards, scripted(seconds, calls), kAttention);
  };
  size_t calls = 0;
  ProductProbe probe = probe_with({1.0, 0.5}, &calls);
  if (!loaded) {
    EXPECT_FALSE(probe.attention.has_value());
    EXPECT_EQ(calls, 4u);
    return;
  }
  EXPECT_EQ(calls, 6u);
  ASSERT_TRUE(probe.attention.has_value());
  const bool by_default = attention_tiles_in_bf16(only_class(probe).route.in_float32);
  EXPECT_EQ(probe.attention->in_bf16, !by_default);
  EXPECT_DOUBLE_EQ(by_default ? probe.attention->bf16_seconds : probe.attention->float32_seconds,
                   1.0);
  EXPECT_DOUBLE_EQ(by_default ? probe.attention->float32_seconds : probe.attention->bf16_seconds,
                   0.5);
  EXPECT_EQ(probe.attention->timed.heads, 4);
  EXPECT_EQ(probe.attention->timed.seq, 40);
  calls = 0;
  EXPECT_EQ(probe_with({1.0, 0.95}, &calls).attention->in_bf16, by_default);  // within the noise
  calls = 0;
  EXPECT_EQ(probe_with({4e-4, 1e-4}, &calls).attention->in_bf16, by_default);  // under 1 ms
  // No attention in float32 runs, or without rows (eager attention).
  calls = 0;
  EXPECT_FALSE(probe_products(at::kFloat, kForwards, scripted(std::vector<double>(8, 1.0), &calls),
                              kAttention)
                   .attention.has_value());
  calls = 0;
  EXPECT_FALSE(probe_products(at::kBFloat16, kForwards, scripted({1, 1, 1, 1}, &calls))
                   .attention.has_value());
  // The real clock: the kernel runs both ways at the probe's shape, and leaves the rule in force.
  probe = probe_products(at::kBFloat16, kForwards, fastest_of_three_calls, kAttention);
  ASSERT_TRUE(probe.attention.has_value());
  EXPECT_GT(probe.attention->bf16_seconds, 0);
  EXPECT_GT(probe.attention->float32_seconds, 0);
  EXPECT_FALSE(chosen_attention_tiles().has_value());
}

// Rows beyond kProbedAttentionRows are not timed: the tiles' rates are the same further on.
TEST(ProductProbe, TimesAttentionOnAtMostItsRowCap) {
  size_t calls = 0;
  const ProductProbe probe = probe_products(at::kBFloat16, {}, scripted({1, 1}, &calls),
                                            {2, 2, 4 * kProbedAttentionRows, 16});
  ASSERT_EQ(probe.attention.has_value(), cpu_info().onednn_gemm_bf16 != nullptr);
  if (probe.attention) {
    EXPECT_EQ(probe.attention->timed.seq, kProbedAttentionRows);
  }
}

TEST(ProductProbe, ReadsBackFromItsText) {
  size_t calls = 0;
  ProductProbe probe = probe_products(at::kBFloat16, kForwards, scripted({1, 0.5, 1, 0.5}, &calls));
  probe.attention = ProbedAttention{kAttention, true, 0.25, 0.125};
  const ProductProbe read = ProductProbe::from_text(probe.to_text(), "here");
  EXPECT_EQ(read.key, probe.key);
  ASSERT_EQ(read.classes.size(), 1u);
  EXPECT_EQ(read.classes[0].product, probe.classes[0].product);
  EXPECT_EQ(read.classes[0].route, probe.classes[0].route);
  EXPECT_EQ(read.classes[0].seconds, probe.classes[0].seconds);
  ASSERT_TRUE(read.attention.has_value());
  EXPECT_EQ(read.attention->timed.kv_heads, 2);
  EXPECT_EQ(read.attention->timed.head_dim, 16);
  EXPECT_TRUE(read.attention->in_bf16);
  EXPECT_EQ(read.attention->bf16_seconds, 0.25);
  EXPECT_EQ(read.attention->float32_seconds, 0.125);
  EXPECT_EQ(read.to_text(), probe.to_text());
  EXPECT_THROW(ProductProbe::from_text("strata product probe 1\nkey k\nattention 4 2 40\n", "f"),
               UserError);
  EXPECT_THROW(ProductProbe::from_text("something else\n", "f.txt"), UserError);
  try {
    ProductProbe::from_text("strata product probe 1\nkey k\nclass 6 0 1 1 7 0\n", "f.txt");
    ADD_FAILURE() << "path 7 was read";
  } catch (const UserError& error) {
    const std::string message = error.what();
    for (const char* part : {"f.txt", "path 7", "delete it"}) {
      EXPECT_NE(message.find(part), std::string::npos) << message;
    }
  }
}

TEST(ProductProbe, KeyNamesTheDtypeShapesAndThreads) {
  const std::string key = product_probe_key(at::kFloat, kForwards);
  EXPECT_NE(key.find("threads " + std::to_string(at::get_num_threads())), std::string::npos) << key;
  EXPECT_NE(key.find("64x32x16nt"), std::string::npos) << key;
  EXPECT_NE(key, product_probe_key(at::kBFloat16, kForwards));
  EXPECT_NE(key, product_probe_key(at::kFloat, {kForwards[0]}));
  const std::string with_attention = product_probe_key(at::kBFloat16, kForwards, kAttention);
  EXPECT_NE(with_attention.find("attention 4x2x40x16"), std::string::npos) << with_attention;
  EXPECT_NE(with_attention, product_probe_key(at::kBFloat16, kForwards, {4, 2, 80, 16}));
}

// The first call probes and writes the file, the second reads it (the same choice); a file that
// cannot be read is probed again and replaced.
TEST(ProductProbe, IsCachedUnderTheCacheDirectory) {
  testing::TempDir dir;
  const ProductProbe first = cached_product_probe(at::kFloat, kForwards, {}, dir.path());
  EXPECT_FALSE(first.from_cache);
  const auto files = [&] {
    std::vector<std::filesystem::path> found;
    for (const auto& entry : std::filesystem::directory_iterator(dir.path() + "/products")) {
      found.push_back(entry.path());
    }
    return found;
  };
  ASSERT_EQ(files().size(), 1u);
  const ProductProbe second = cached_product_probe(at::kFloat, kForwards, {}, dir.path());
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(second.to_text(), first.to_text());
  std::ofstream(files()[0]) << "garbage";
  const ProductProbe third = cached_product_probe(at::kFloat, kForwards, {}, dir.path());
  EXPECT_FALSE(third.from_cache);
  EXPECT_TRUE(cached_product_probe(at::kFloat, kForwards, {}, dir.path()).from_cache);
  EXPECT_EQ(files().size(), 1u) << "no partial file is left behind";
}

TEST(ProductProbe, UseInstallsTheChosenRoutes) {
  ProductProbe probe;
  ProbedClass probed;
  probed.product = {at::kFloat, true, false};
  probed.route = {ProductPath::aten, false};
  probe.classes.push_back(probed);
  probe.use();
  EXPECT_EQ(class_route({at::kFloat, true, false}), probed.route);
  ProductProbe{}.use();
  EXPECT_EQ(class_route({at::kFloat, true, false}), default_route({at::kFloat, true, false}));
}

// A probe's attention choice replaces the default rule; a probe without one restores the rule.
TEST(ProductProbe, UseInstallsTheAttentionTiles) {
  const bool loaded = cpu_info().onednn_gemm_bf16 != nullptr;
  ProductProbe probe;
  for (const bool in_bf16 : {true, false}) {
    probe.attention = ProbedAttention{kAttention, in_bf16, 1, 1};
    probe.use();
    EXPECT_EQ(chosen_attention_tiles(), std::optional<bool>(in_bf16));
    EXPECT_EQ(attention_tiles_in_bf16(), in_bf16 && loaded);
  }
  ProductProbe{}.use();
  EXPECT_FALSE(chosen_attention_tiles().has_value());
  EXPECT_EQ(attention_tiles_in_bf16(),
            attention_tiles_in_bf16(class_route({at::kBFloat16, false, true}).in_float32));
}

}  // namespace
}  // namespace strata
