// The serving layout and the session's set-up and tear-down.
#include "strata/serve/serve.h"

#include <algorithm>
#include <cmath>

#include "strata/core/error.h"
#include "strata/core/stages.h"
#include "strata/model/product_routes.h"

namespace strata {
namespace {

bool overrides_key(const std::vector<std::string>& overrides, const std::string& key) {
  return std::any_of(overrides.begin(), overrides.end(),
                     [&](const std::string& item) { return item.rfind(key + "=", 0) == 0; });
}

}  // namespace

Config serving_config(const Config& checkpoint_config, const std::vector<std::string>& overrides,
                      int64_t world_size) {
  Config base = checkpoint_config;
  base.parallel = ParallelConfig{};
  base.parallel.comm_timeout_s = checkpoint_config.parallel.comm_timeout_s;
  Config config = parse_config(to_toml(base), "the checkpoint's config", overrides);
  if (!overrides_key(overrides, "parallel.tp") && config.parallel.pp >= 1 &&
      world_size % config.parallel.pp == 0) {
    config.parallel.tp = world_size / config.parallel.pp;
  }
  // Every rank reaches the same verdict from the same checkpoint and flags.
  try {
    return validate_serving_config(config, world_size);
  } catch (const UserErrorOnEveryRank&) {
    throw;
  } catch (const UserError& error) {
    throw UserErrorOnEveryRank(error.what());
  }
}

StageSpec serving_stage(const Config& validated, const MeshCoords& coords) {
  const std::vector<int64_t> layers = stage_layers(validated.parallel, validated.model.shape());
  const int64_t stages = static_cast<int64_t>(layers.size());
  StageSpec stage;
  stage.first_layer = first_layer_of(layers, coords.pp);
  stage.num_layers = layers[coords.pp];
  stage.first = coords.pp == 0;
  stage.last = coords.pp == stages - 1;
  return stage;
}

ServeSession::ServeSession(Mesh& mesh, const Config& config, const ServeOptions& options,
                           const StageLoader& load)
    : mesh_(mesh) {
  if (mesh_.rank() == 0) {
    front_ = std::make_unique<HttpFront>(
        config.serve,
        ServedModel{options.model_name, config.model.seq_len, config.model.vocab_size,
                    options.tokenizer, options.stop_token_ids, options.chat_template},
        options.api_key);
    port_ = front_->start();
    if (options.on_listening) options.on_listening(port_);
  }
  choose_product_routes(mesh_.world(), config, serving_products(config));
  auto model = load(serving_stage(config, mesh_.coords()), &mesh_.tp());

  // Every rank must hold the same blocks: the pool is what the tightest rank fits.
  at::Tensor blocks = at::tensor({kv_blocks_in(*model, config.serve.kv_cache_mb)}, at::kLong);
  at::Tensor block_bytes = at::tensor({kv_block_bytes(*model)}, at::kLong);
  mesh_.world().all_reduce(blocks, ReduceOp::Min);
  mesh_.world().all_reduce(block_bytes, ReduceOp::Max);
  num_blocks_ = blocks.item<int64_t>();
  const int64_t needed = blocks_for(config.model.seq_len);
  if (num_blocks_ < needed) {
    const double needed_mb =
        static_cast<double>(needed * block_bytes.item<int64_t>()) / (1024.0 * 1024.0);
    throw UserErrorOnEveryRank(
        str("serve.kv_cache_mb (", config.serve.kv_cache_mb, ") holds ", num_blocks_,
            " KV blocks of ", kBlockTokens, " tokens on the fullest rank; one sequence",
            " of model.seq_len (", config.model.seq_len, ") needs ", needed,
            ": set serve.kv_cache_mb to at least ", std::ceil(needed_mb * 100) / 100));
  }
  stage_ = std::make_unique<ServedStage>(std::move(model), mesh_, num_blocks_);
  if (mesh_.rank() == 0) {
    engine_ = std::make_unique<Engine>(*stage_, mesh_.world(), config.serve, options.tokenizer,
                                       num_blocks_);
    front_->attach(engine_.get());
  }
}

ServeSession::~ServeSession() {
  if (front_) front_->stop();
}

void ServeSession::run() {
  if (mesh_.rank() == 0) {
    engine_->serve();
    front_->stop();
  } else {
    follow_engine(*stage_, mesh_.world());
  }
}

void ServeSession::stop() {
  STRATA_CHECK(engine_, "stop() is for rank 0");
  engine_->stop();
}

}  // namespace strata
