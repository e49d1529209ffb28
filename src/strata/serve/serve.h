// `strata serve` on every rank: the serving layout from the checkpoint's config, then a
// session that listens (rank 0), loads this rank's stage, sizes the KV cache pool the same on
// every rank and runs the engine until stopped.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strata/core/config.h"
#include "strata/data/tokenizer.h"
#include "strata/dist/mesh.h"
#include "strata/serve/engine.h"
#include "strata/serve/http_front.h"
#include "strata/serve/step.h"

namespace strata {

// The checkpoint's config with its training layout dropped, then `overrides` (--set) applied:
// serving runs parallel.tp * parallel.pp = world_size ranks (tp = world_size / pp unless set),
// with dp, cp and ep of 1. Validated for serving (validate_serving_config: the model, [serve],
// serving's layout rules, a dropless MoE); the training keys are not serving's. Throws
// UserErrorOnEveryRank naming keys.
Config serving_config(const Config& checkpoint_config, const std::vector<std::string>& overrides,
                      int64_t world_size);

// Builds this rank's stage: the layers `stage` names, split over `tp`.
using StageLoader = std::function<std::unique_ptr<GPT>(const StageSpec& stage, Comm* tp)>;

// What a session serves besides the config: the model's name and text, and who may ask.
struct ServeOptions {
  std::string model_name;                // the id of /v1/models
  const Tokenizer* tokenizer = nullptr;  // nullptr: no tokenizer files, prompts are token ids
  std::vector<int64_t> stop_token_ids;   // the model's end-of-text tokens
  const ChatTemplate* chat_template = nullptr;  // nullptr: the chat API answers 400
  std::string api_key;                         // /v1/ requests must send `Bearer KEY`; empty = none
  std::function<void(int port)> on_listening;  // rank 0, once it listens
};

class ServeSession {
 public:
  // Collective over the mesh (tp × pp of the validated serving config). Rank 0 listens first
  // (GET /health answers 503 while loading) and calls options.on_listening(port); then every
  // rank loads its stage and the pool is sized by serve.kv_cache_mb on the tightest rank
  // (UserError if one sequence of model.seq_len tokens does not fit).
  ServeSession(Mesh& mesh, const Config& config, const ServeOptions& options,
               const StageLoader& load);
  ~ServeSession();

  // Collective: rank 0 serves until stop(), the others follow its steps.
  void run();
  // Rank 0, any thread: run() returns after the current step.
  void stop();

  int port() const { return port_; }  // rank 0
  int64_t num_blocks() const { return num_blocks_; }
  Engine* engine() { return engine_.get(); }  // rank 0

 private:
  Mesh& mesh_;
  std::unique_ptr<HttpFront> front_;  // rank 0
  std::unique_ptr<ServedStage> stage_;
  std::unique_ptr<Engine> engine_;  // rank 0
  int port_ = 0;
  int64_t num_blocks_ = 0;
};

// The stage of `validated`'s layout that mesh rank `coords` holds.
StageSpec serving_stage(const Config& validated, const MeshCoords& coords);

}  // namespace strata
