// The training loop: data -> microbatch forward/backward -> gradient reduction -> clip ->
// update, with evaluation, checkpoints (save and resume) and metrics around it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "strata/core/config.h"
#include "strata/dist/mesh.h"
#include "strata/model/gpt.h"
#include "strata/optim/adamw.h"

namespace strata {

class TokenDataset;
class Trace;
struct ShardedTensor;

struct TrainResult {
  std::vector<double> losses;       // one per optimizer step run by this call
  std::vector<double> eval_losses;  // one per evaluation
  int64_t first_step = 0;           // 0-based step this call started at (after a resume)
  std::string last_checkpoint;      // directory of the last checkpoint written, if any
};

class Trainer {
 public:
  // config must be validated for mesh.shape().world() ranks.
  Trainer(const Config& config, Mesh& mesh);
  ~Trainer();

  TrainResult run();

  GPT& model() { return *model_; }
  AdamW& optimizer() { return *optimizer_; }

 private:
  double train_step(int64_t step);  // returns the step's mean loss over the global batch
  double evaluate();
  void reduce_gradients();
  double clip_gradients();  // returns the global norm before clipping
  std::vector<ShardedTensor> checkpoint_tensors();
  void save(int64_t steps_done, TrainResult& result);
  int64_t maybe_resume();  // returns the step to start at

  Config config_;
  Mesh& mesh_;
  at::ScalarType dtype_;
  std::unique_ptr<GPT> model_;
  std::unique_ptr<AdamW> optimizer_;
  std::shared_ptr<TokenDataset> dataset_;
  int64_t rows_per_dp_rank_;  // sequences of the global batch this dp rank processes
  double peak_flops_ = 0;     // measured matmul rate of this rank
  std::unique_ptr<Trace> trace_;
};

// Best of a few dense float32 matmuls on this rank's threads, in FLOP/s.
double measure_matmul_peak_flops();

}  // namespace strata
