// The config files shipped with strata: every configs/*.toml loads and validates for the
// layout it names, and docs/config.md documents every key in its section.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "expect_error.h"
#include "strata/core/config.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> shipped_configs() {
  std::vector<std::string> paths;
  for (const auto& entry : fs::directory_iterator(fs::path(STRATA_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() == ".toml") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

TEST(ConfigFiles, EveryShippedConfigValidates) {
  const std::vector<std::string> paths = shipped_configs();
  ASSERT_FALSE(paths.empty()) << "no configs/*.toml under " << STRATA_SOURCE_DIR;
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    Config config;
    ASSERT_NO_THROW(config = load_config(path));
    const ParallelConfig& parallel = config.parallel;
    // dp = -1 configs run on the fewest ranks their model-parallel sizes allow (dp = ep), and
    // on twice as many.
    const int64_t world_size =
        parallel.tp * parallel.pp * parallel.cp * (parallel.dp == -1 ? parallel.ep : parallel.dp);
    try {
      validate_config(config, world_size);
      if (parallel.dp == -1) validate_config(config, 2 * world_size);
    } catch (const UserError& error) {
      ADD_FAILURE() << error.what();
    }
  }
}

TEST(ConfigFiles, TinyConfigIsTheSmallTestModel) {
  const Config config =
      validate_config(load_config(std::string(STRATA_SOURCE_DIR) + "/configs/tiny.toml"), 1);
  EXPECT_EQ(config.model.vocab_size, 256);
  EXPECT_EQ(config.model.d_model, 64);
  EXPECT_EQ(config.model.n_layers, 2);
  EXPECT_EQ(config.model.n_heads, 4);
  EXPECT_EQ(config.model.seq_len, 64);
  EXPECT_EQ(config.data.source, DataSource::synthetic);
  EXPECT_EQ(config.train.steps, 20);
}

std::string read_file(const std::string& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(ConfigFiles, DocsDescribeEveryKeyInItsSection) {
  const std::string docs = read_file(std::string(STRATA_SOURCE_DIR) + "/docs/config.md");
  ASSERT_FALSE(docs.empty());
  for (const std::string& full_name : config_keys()) {
    const std::string section = full_name.substr(0, full_name.rfind('.'));  // model.moe.top_k
    const std::string name = full_name.substr(section.size() + 1);
    const size_t begin = docs.find("\n## [" + section + "]");
    ASSERT_NE(begin, std::string::npos) << "docs/config.md has no '## [" << section << "]'";
    const size_t end = docs.find("\n## ", begin + 1);
    const std::string part = docs.substr(begin, end - begin);
    EXPECT_CONTAINS(part, "| `" + name + "` |");
  }
}

}  // namespace
}  // namespace strata
