// The training loop: data -> pipeline of microbatch forward/backward -> gradient reduction
// -> clip -> update, with evaluation, checkpoints (save and resume) and metrics around it.
#pragma once
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "strata/core/config.h"
#include "strata/data/dataset.h"
#include "strata/dist/mesh.h"
#include "strata/kernels/matmul_peak.h"
#include "strata/model/gpt.h"
#include "strata/optim/adamw.h"
#include "strata/optim/loss_scale.h"
#include "strata/train/metrics.h"
#include "strata/train/pipeline_executor.h"

namespace strata {

class Trace;
class Watchdog;
class AsyncCheckpointer;
class CommCheckpointGroup;
class PipelineExecutor;
class DataParallel;
struct ShardedTensor;
struct StepMetrics;

// Mixture-of-experts statistics of one step, over the whole global batch.
struct MoeStepStats {
  std::vector<int64_t> layers;             // global index of each MoE layer
  std::vector<std::vector<int64_t>> load;  // per MoE layer: assignments routed to each expert
  double dropped_fraction = 0;             // assignments over capacity / all assignments
  double aux_loss = 0;        // Switch loss, sum over MoE layers of the mean over sequences
  double z_loss = 0;          // router z-loss, sum over MoE layers of the mean over tokens
  double load_imbalance = 0;  // max / mean of load, averaged over the MoE layers
};

struct TrainResult {
  std::vector<double> losses;          // one per optimizer step run by this call
  std::vector<double> eval_losses;     // one per evaluation
  std::vector<double> grad_norms;      // one per optimizer step: global norm before clipping
  std::vector<int64_t> peak_inflight;  // per step: most microbatch activations held on this rank
  std::vector<MoeStepStats> moe;       // per step, when the model has MoE layers
  int64_t first_step = 0;              // 0-based step this call started at (after a resume)
  std::string last_checkpoint;         // directory of the last checkpoint written, if any
  std::vector<StepMetrics> metrics;    // per step, this rank's view (memory, comm bytes)
};

class Trainer {
 public:
  // config must be validated for mesh.shape().world() ranks. dataset: the tokens to train on
  // instead of those config.data names (tests build them in memory); nullptr = open config.data.
  Trainer(const Config& config, Mesh& mesh, std::shared_ptr<TokenDataset> dataset = nullptr);
  ~Trainer();

  TrainResult run();

  // This rank's model chunks (one per virtual pipeline stage it runs) and their parameters.
  // Their values and gradients are views into DataParallel's buffers; under ZeRO-3 a value
  // holds storage only while its layer is gathered (sizes and shapes are always valid).
  const std::vector<std::unique_ptr<GPT>>& chunks() const { return chunks_; }
  const std::vector<Parameter*>& parameters() const { return parameters_; }
  int64_t num_parameters() const;  // of the whole model
  AdamW& optimizer();
  // Called with the step index after each step's gradients are complete (reduced, and still
  // scaled by the loss scale), before the overflow check and the update: tests inject faults
  // through it.
  void set_gradient_hook(std::function<void(int64_t step)> hook) {
    gradient_hook_ = std::move(hook);
  }

 private:
  // What one optimizer step produced; step_metrics() turns it into the reported metrics.
  struct StepResult {
    double loss = 0;            // mean over the step's global batch
    double grad_norm = 0;       // global, before clipping (NaN when the step was skipped)
    double loss_scale = 1.0;    // what the backward's loss was multiplied by
    bool skipped = false;       // fp16: the gradients overflowed, the update was skipped
    double lr = 0;              // the learning rate the update used
    int64_t loss_tokens = 0;    // targets of the global batch that carried loss
    double receive_wait_s = 0;  // longest time a pipeline stage blocked in receives: the bubble
    int64_t peak_inflight = 0;  // most microbatch activations this rank held at once
    MoeStepStats moe;
  };
  // The optimizer step, as the algorithm reads: gradients of the global batch (the schedule's
  // microbatches), finished over the data-parallel groups, clipped, applied.
  StepResult train_step(int64_t step);
  StepMetrics step_metrics(int64_t step, const StepResult& result, double step_time_s,
                           int64_t live_bytes_before) const;
  double global_mean_loss(double last_stage_mean);  // collective over pp and dp
  // The executor's loss weight for global batch `batch` of `split` (see its definition);
  // sets *loss_tokens to the targets of that batch that carry loss.
  double loss_weight(Split split, int64_t batch, int64_t* loss_tokens) const;
  MicrobatchSource microbatches_of(Split split, int64_t batch) const;
  double evaluate();
  MoeStepStats collect_moe_stats();  // collective over dp and pp
  // Saves after `steps_done` steps (synchronously, or hands the copy to the background
  // writer); returns the seconds the training loop was blocked.
  double save(int64_t steps_done, TrainResult& result);
  int64_t maybe_resume();  // returns the step to start at

  Config config_;
  Mesh& mesh_;
  at::ScalarType dtype_;
  std::vector<std::unique_ptr<GPT>> chunks_;
  std::vector<Parameter*> parameters_;
  std::unique_ptr<DataParallel> data_parallel_;  // gradients, ZeRO shards, the optimizer
  LossScaler loss_scaler_;                       // fp16 only
  std::function<void(int64_t)> gradient_hook_;
  std::unique_ptr<PipelineExecutor> executor_, eval_executor_;
  std::unique_ptr<Comm> tied_;  // first and last virtual stage's ranks, for the tied embedding
  std::shared_ptr<TokenDataset> dataset_;
  void log_samples(int64_t step, int64_t first_row, const at::Tensor& rows) const;
  int64_t rows_per_dp_rank_;  // sequences of the global batch this dp rank processes
  // log.samples, on the ranks that read a step's inputs: the rows each microbatch trained on.
  std::unique_ptr<std::ofstream> samples_;
  double peak_flops_ = 0;  // measured matmul rate of this rank
  std::unique_ptr<Trace> trace_;
  std::unique_ptr<CommCheckpointGroup> checkpoint_group_;  // the world, for saves and resume
  std::unique_ptr<AsyncCheckpointer> async_checkpointer_;  // checkpoint.async only
};

// The shapes a run's MFU is measured against: the forward products x W^T of this rank's linear
// layers at its rows (training_products, model/product_routes.h; rows capped at 2048, inner
// size and columns at 4096), the few-row ones left out; matmul_peak_shapes() when none is left.
std::vector<MatmulShape> run_peak_shapes(const Config& config);

// The matmul-peak probe (kernels/matmul_peak.h) in `dtype` on this rank's threads, in FLOP/s:
// the fastest of `shapes`, each timed alone (measured once per dtype, shapes and process). A
// fixed set of smaller shapes, FLOPs over seconds summed, ran below what a model's own products
// reach (AMD EPYC, 2 threads: 289 GFLOP/s against 340-374 for d_model 768 at 2048 rows), and
// MFU read 110%.
double measure_matmul_peak_flops(at::ScalarType dtype, const std::vector<MatmulShape>& shapes);
// The fastest rate among `shapes`, each timed alone with `timer` (no caching).
double fastest_shape_rate(at::ScalarType dtype, const std::vector<MatmulShape>& shapes,
                          const ProductTimer& timer);

}  // namespace strata
