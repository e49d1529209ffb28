// --set "section.key=value" overrides: the value is read as TOML (bare text for string keys),
// later overrides win, and bad syntax or unknown keys are clear errors.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "strata/core/config.h"

namespace strata {
namespace {

using testing::user_error;

Config with(const std::vector<std::string>& overrides) {
  return parse_config("[model]\nd_model = 64\n", "run.toml", overrides);
}

std::string override_error(const std::string& setting) {
  return user_error([&] { with({setting}); });
}

TEST(ConfigOverrides, ScalarTypes) {
  EXPECT_EQ(with({"model.n_layers=3"}).model.n_layers, 3);
  EXPECT_EQ(with({"parallel.dp=-1"}).parallel.dp, -1);
  EXPECT_EQ(with({"train.seed=0x10"}).train.seed, 16u);
  EXPECT_EQ(with({"model.d_model=32"}).model.d_model, 32) << "an override beats the file";
  EXPECT_EQ(with({"train.lr=3.0"}).train.lr, 3.0);
  EXPECT_EQ(with({"train.lr=3"}).train.lr, 3.0) << "integers are accepted for floats";
  EXPECT_EQ(with({"train.lr=1e-4"}).train.lr, 1e-4);
  EXPECT_EQ(with({"train.lr = 0.5 "}).train.lr, 0.5) << "spaces around key and value";
  EXPECT_TRUE(with({"log.trace=true"}).log.trace);
  EXPECT_FALSE(with({"model.tie_embeddings=false"}).model.tie_embeddings);
  EXPECT_EQ(with({"train.steps=5", "train.steps=6"}).train.steps, 6) << "the later --set wins";
}

TEST(ConfigOverrides, Arrays) {
  EXPECT_EQ(with({"parallel.pp_layers=[3, 1]"}).parallel.pp_layers.layers,
            (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(with({"parallel.pp_layers=[]"}).parallel.pp_layers, PipelineLayers{});
  EXPECT_CONTAINS(override_error("parallel.pp_layers=[3, 1.5]"),
                  "parallel.pp_layers must be an array of integers or \"auto\", got array [");
  EXPECT_CONTAINS(override_error("parallel.pp_layers=3"),
                  "parallel.pp_layers must be an array of integers or \"auto\", got integer 3 "
                  "(--set parallel.pp_layers=3)");
}

// parallel.pp_layers takes the word "auto", bare or quoted, and no other; a list after it wins.
TEST(ConfigOverrides, PipelineLayersAuto) {
  const PipelineLayers automatic{true, {}};
  EXPECT_EQ(with({"parallel.pp_layers=auto"}).parallel.pp_layers, automatic);
  EXPECT_EQ(with({"parallel.pp_layers=\"auto\""}).parallel.pp_layers, automatic);
  EXPECT_EQ(with({"parallel.pp_layers=auto", "parallel.pp_layers=[3, 1]"}).parallel.pp_layers,
            (PipelineLayers{false, {3, 1}}));
  EXPECT_CONTAINS(override_error("parallel.pp_layers=\"balanced\""),
                  "parallel.pp_layers must be an array of integers or \"auto\", got string "
                  "\"balanced\"");
  EXPECT_CONTAINS(override_error("parallel.pp_layers=balanced"),
                  "parallel.pp_layers must be an array of integers or \"auto\"");
}

TEST(ConfigOverrides, Strings) {
  EXPECT_EQ(with({"model.pos=\"rope\""}).model.pos, PositionEncoding::rope);
  EXPECT_EQ(with({"model.pos=rope"}).model.pos, PositionEncoding::rope)
      << "bare strings for enum keys";
  EXPECT_EQ(with({"model.pos='rope'"}).model.pos, PositionEncoding::rope);
  EXPECT_EQ(with({"parallel.schedule=zb-h1"}).parallel.schedule, PipelineSchedule::zb_h1);
  EXPECT_CONTAINS(
      override_error("model.pos=alibi"),
      "model.pos must be \"learned\" or \"rope\", got \"alibi\" (--set model.pos=alibi)");
  EXPECT_CONTAINS(override_error("model.pos=\"alibi\""),
                  "model.pos must be \"learned\" or \"rope\", got \"alibi\"");
  EXPECT_EQ(with({"data.path=/data/my corpus.txt"}).data.path, "/data/my corpus.txt");
  EXPECT_EQ(with({"data.path=a=b"}).data.path, "a=b") << "only the first '=' splits";
  EXPECT_EQ(with({"data.path=\"tab\\there\""}).data.path, "tab\there");
  EXPECT_EQ(with({"checkpoint.dir="}).checkpoint.dir, "");
  EXPECT_EQ(with({"data.tokenizer=3"}).data.tokenizer, "3") << "bare text stays text";
}

TEST(ConfigOverrides, WrongTypeNamesTheOverride) {
  const std::string message = override_error("model.n_layers=[3,2,3]");
  EXPECT_CONTAINS(message, "model.n_layers must be an integer, got array [");
  EXPECT_CONTAINS(message, "(--set model.n_layers=[3,2,3])");
  EXPECT_CONTAINS(override_error("train.lr=\"fast\""),
                  "train.lr must be a number, got string \"fast\" (--set train.lr=\"fast\")");
  EXPECT_CONTAINS(override_error("model.d_model=1.5"),
                  "model.d_model must be an integer, got float 1.5");
  EXPECT_CONTAINS(override_error("log.trace=1"),
                  "log.trace must be a boolean (true or false), got integer 1");
  EXPECT_CONTAINS(override_error("train.seed=-3"),
                  "train.seed must be a non-negative integer, got integer -3");
}

TEST(ConfigOverrides, BadValuesAndSyntax) {
  EXPECT_CONTAINS(override_error("train.lr=fast"),
                  "--set train.lr=fast: 'fast' is not a TOML value; train.lr must be a number, "
                  "e.g. --set train.lr=0.0003");
  EXPECT_CONTAINS(override_error("log.trace=yes"),
                  "'yes' is not a TOML value; log.trace must be a boolean (true or false), e.g. "
                  "--set log.trace=false");
  EXPECT_CONTAINS(override_error("model.n_layers=two"),
                  "model.n_layers must be an integer, e.g. --set model.n_layers=2");
  EXPECT_CONTAINS(override_error("model.pos=\"rope"),
                  "'\"rope' is not a TOML value; model.pos must be \"learned\" or \"rope\", e.g. "
                  "--set model.pos=learned");
  EXPECT_CONTAINS(override_error("data.path='x"), "e.g. --set data.path=text");
  EXPECT_CONTAINS(override_error("train.lr="),
                  "--set train.lr=: missing value; train.lr must be a number");
  EXPECT_CONTAINS(override_error("train.steps=1\nlr = 2"), "more than one TOML value");
  EXPECT_CONTAINS(override_error("train.lr"),
                  "--set train.lr: expected section.key=value, e.g. --set train.lr=0.001");
  EXPECT_CONTAINS(override_error("lr=0.1"),
                  "--set lr=0.1: the key must be section.key (e.g. train.lr); did you mean "
                  "'train.lr'?");
  EXPECT_CONTAINS(override_error("=3"), "--set =3: the key must be section.key");
}

TEST(ConfigOverrides, UnknownKeyOrSection) {
  const std::string message = override_error("model.n_head=3");
  EXPECT_CONTAINS(message, "unknown key 'model.n_head' in --set model.n_head=3");
  EXPECT_CONTAINS(message, "did you mean 'model.n_heads'?");
  EXPECT_CONTAINS(message, "allowed in [model]: vocab_size, d_model,");
  EXPECT_CONTAINS(override_error("modle.n_heads=3"),
                  "unknown section [modle] in --set modle.n_heads=3; did you mean [model]?");
  EXPECT_CONTAINS(override_error("model.n_heads.x=3"), "unknown key 'model.n_heads.x'");
  EXPECT_CONTAINS(override_error("model.steps=3"), "did you mean 'train.steps'?");
}

}  // namespace
}  // namespace strata
