// Trainer: one optimizer step reads like the algorithm; diagnostics sit around it.
#include "strata/train/trainer.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <string>

#include "strata/ckpt/async_checkpoint.h"
#include "strata/ckpt/checkpoint.h"
#include "strata/core/error.h"
#include "strata/core/fault_injection.h"
#include "strata/core/hash.h"
#include "strata/core/memory.h"
#include "strata/core/precision.h"
#include "strata/core/stages.h"
#include "strata/data/dataset.h"
#include "strata/data_parallel/data_parallel.h"
#include "strata/dist/flight_record.h"
#include "strata/dist/trace.h"
#include "strata/hf/hf_load.h"
#include "strata/kernels/matmul.h"
#include "strata/kernels/matmul_peak.h"
#include "strata/model/product_routes.h"
#include "strata/parallel/context_parallel.h"
#include "strata/pipeline/generators.h"
#include "strata/train/metrics.h"
#include "strata/train/op_profile.h"
#include "strata/train/pipeline_executor.h"
#include "strata/train/watchdog.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// {"all_reduce": value, ...} for the kinds with a nonzero value.
template <typename T, size_t N>
nlohmann::json per_kind_json(const std::array<T, N>& values) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t kind = 0; kind < N; ++kind) {
    if (values[kind] > 0) out[comm_kind_name(static_cast<CommKind>(kind))] = values[kind];
  }
  return out;
}

}  // namespace

std::vector<MatmulShape> run_peak_shapes(const Config& config) {
  // Rows, inner size and columns capped, so that a large model's probe (a vocabulary-wide head
  // included) stays short and its operands small; GEMMs of 2048 rows and 4096 columns run at
  // their full rate on the CPUs measured.
  constexpr int64_t kPeakRows = 2048, kPeakWidth = 4096;
  std::vector<MatmulShape> shapes;
  for (const ProductShape& product : training_products(config).shapes) {
    if (product.a_transposed || !product.b_transposed || few_row_product(product.m, false, true)) {
      continue;
    }
    const MatmulShape shape{std::min(product.m, kPeakRows), std::min(product.k, kPeakWidth),
                            std::min(product.n, kPeakWidth)};
    if (std::find(shapes.begin(), shapes.end(), shape) == shapes.end()) shapes.push_back(shape);
  }
  return shapes.empty() ? matmul_peak_shapes() : shapes;
}

double measure_matmul_peak_flops(at::ScalarType dtype, const std::vector<MatmulShape>& shapes) {
  // Measured once per dtype, shapes and process: the one probe (kernels/matmul_peak.h), which
  // times the linear layers' own routed products, shape by shape; the fastest is the peak.
  static std::map<std::string, double> measured;
  std::string key = c10::toString(dtype);
  for (const MatmulShape& shape : shapes) key += str(" ", shape.m, "x", shape.k, "x", shape.n);
  auto found = measured.find(key);
  if (found != measured.end()) return found->second;
  return measured[key] = fastest_shape_rate(dtype, shapes, fastest_of_three_calls);
}

double fastest_shape_rate(at::ScalarType dtype, const std::vector<MatmulShape>& shapes,
                          const ProductTimer& timer) {
  double peak = 0;
  for (const MatmulShape& shape : shapes) {
    peak = std::max(peak, measure_matmul_peak(dtype, timer, {shape}));
  }
  return peak;
}

Trainer::Trainer(const Config& config, Mesh& mesh, std::shared_ptr<TokenDataset> dataset)
    : config_(config),
      mesh_(mesh),
      dtype_(compute_dtype(config.train.precision)),
      loss_scaler_(config.train.precision == Precision::fp16, LossScaler::Policy{}) {
  STRATA_CHECK(mesh_.shape() == mesh_shape_of(config_.parallel), "the mesh ",
               to_string(mesh_.shape()), " is not the config's layout ",
               to_string(mesh_shape_of(config_.parallel)),
               "; build the mesh with Mesh(world, mesh_shape_of(config.parallel))");
  install_cpu_allocator();
  choose_product_routes(mesh_.world(), config_, training_products(config_));
  const ModelConfig& model = config_.model;
  const StagePlacement placement = stage_placement(config_.parallel);
  const int64_t p = placement.pp, v = placement.vpp, stages = placement.virtual_stages();
  const int64_t pp_rank = mesh_.coords().pp;

  // Stage partition: contiguous layers per virtual stage.
  const std::vector<int64_t> layers = stage_layers(config_.parallel, model.shape());

  trace_ = std::make_unique<Trace>(config_.log.trace && !config_.log.dir.empty(), mesh_.rank());
  const TensorParallel tp{&mesh_.tp(), config_.parallel.sequence_parallel};
  const ContextParallel cp{&mesh_.cp(), config_.parallel.cp_comm, trace_.get()};
  const BlockSpec block = run_block_spec(config_);
  for (int64_t chunk = 0; chunk < v; ++chunk) {
    const int64_t virtual_stage = placement.virtual_stage(pp_rank, chunk);
    StageSpec stage{first_layer_of(layers, virtual_stage), layers[virtual_stage],
                    virtual_stage == 0, virtual_stage == stages - 1};
    chunks_.push_back(std::make_unique<GPT>(
        model, block, config_.train.seed, dtype_, tp, stage, &mesh_.ep(), cp,
        config_.model_init.empty() ? ParameterInit::random : ParameterInit::loaded));
    // Fine-tuning: the Hugging Face model's weights replace the random ones (a resumed
    // checkpoint replaces them in turn).
    if (!config_.model_init.empty()) load_hf_weights(config_.model_init, *chunks_.back());
  }
  for (auto& chunk : chunks_) {
    chunk->set_recompute(config_.train.recompute, config_.train.recompute_layers);
    for (auto& parameter : chunk->parameters()) parameters_.push_back(&parameter);
  }
  dataset_ =
      dataset ? std::move(dataset) : TokenDataset::open(config_.data, model, config_.train.seed);
  rows_per_dp_rank_ = config_.train.global_batch / mesh_.shape().dp;

  const int64_t microbatches = rows_per_dp_rank_ / config_.parallel.micro_batch;
  STRATA_CHECK(microbatches == config_.parallel.microbatches, "config not validated");
  Schedule schedule = build_schedule(config_.parallel, LayoutVocabulary::config());
  const int64_t tokens_per_rank = model.seq_len / mesh_.shape().cp /
                                  (config_.parallel.sequence_parallel ? mesh_.shape().tp : 1);
  const std::vector<int64_t> activation_shape{config_.parallel.micro_batch, tokens_per_rank,
                                              model.d_model};
  std::vector<GPT*> chunk_pointers;
  for (auto& chunk : chunks_) chunk_pointers.push_back(chunk.get());
  executor_ = std::make_unique<PipelineExecutor>(std::move(schedule), chunk_pointers, mesh_.pp(),
                                                 activation_shape, dtype_, trace_.get());
  eval_executor_ = std::make_unique<PipelineExecutor>(
      make_forward_only_schedule(static_cast<int>(p), static_cast<int>(microbatches),
                                 static_cast<int>(v), placement.kind),
      chunk_pointers, mesh_.pp(), activation_shape, dtype_, nullptr);
  // The tied embedding's two copies, on the ranks of the first and the last virtual stage: a
  // group between them when they differ (under zb-v's V both are on rank 0, which sums them).
  const int64_t embedding_rank = placement.rank_of(0), head_rank = placement.rank_of(stages - 1);
  const bool holds_embedding = pp_rank == embedding_rank || pp_rank == head_rank;
  if (embedding_rank != head_rank && model.tie_embeddings) {
    tied_ = std::make_unique<Comm>(
        mesh_.pp().split(holds_embedding ? 0 : 1, static_cast<int>(pp_rank), "pp_tied"));
  }
  data_parallel_ = std::make_unique<DataParallel>(chunk_pointers, mesh_, config_,
                                                  tied_ && holds_embedding ? tied_.get() : nullptr);
  executor_->set_listener(data_parallel_.get());
  checkpoint_group_ = std::make_unique<CommCheckpointGroup>(mesh_.world());
  if (config_.checkpoint.async) {
    async_checkpointer_ = std::make_unique<AsyncCheckpointer>(*checkpoint_group_);
  }
  if (!config_.log.dir.empty()) {
    std::error_code error;  // rank 0's MetricsLog reports an unusable log.dir
    std::filesystem::create_directories(config_.log.dir, error);
    char name[32];
    std::snprintf(name, sizeof name, "/flight_rank_%05d.json", mesh_.rank());
    set_flight_record_path(config_.log.dir + name);
    // One reader per row: the first stage's tp and cp rank 0 of each dp rank.
    const MeshCoords& at = mesh_.coords();
    if (config_.log.samples && at.pp == 0 && at.tp == 0 && at.cp == 0) {
      std::snprintf(name, sizeof name, "/samples_rank_%05d.jsonl", mesh_.rank());
      samples_ = std::make_unique<std::ofstream>(config_.log.dir + name, std::ios::app);
      STRATA_REQUIRE(samples_->good(), "log.samples: cannot write ", config_.log.dir, name);
    }
  }
  peak_flops_ = measure_matmul_peak_flops(dtype_, run_peak_shapes(config_));
}

Trainer::~Trainer() = default;

AdamW& Trainer::optimizer() { return data_parallel_->optimizer(); }

int64_t Trainer::num_parameters() const {
  at::Tensor count = at::zeros({1}, at::kLong);
  for (const Parameter* parameter : parameters_) {
    if (parameter->pp_tied_copy) continue;  // counted on the first virtual stage
    count += numel_of(parameter->spec.global_shape);
  }
  mesh_.pp().all_reduce(count, ReduceOp::Sum);
  return count.item<int64_t>();
}

MicrobatchSource Trainer::microbatches_of(Split split, int64_t batch) const {
  // This dp rank's rows of the global batch, micro_batch rows at a time; under context
  // parallelism this cp rank's tokens of them.
  return [this, split, batch](int64_t microbatch) {
    const int64_t micro_batch = config_.parallel.micro_batch, T = config_.model.seq_len;
    const int64_t first_row = mesh_.coords().dp * rows_per_dp_rank_ + microbatch * micro_batch;
    const at::Tensor rows = dataset_->rows(split, batch, first_row, micro_batch, T);
    if (samples_ && split == Split::Train) log_samples(batch, first_row, rows);
    Microbatch out{rows.narrow(1, 0, T), rows.narrow(1, 1, T), {}};
    if (config_.data.document_mask) {
      out.documents = dataset_->documents(split, batch, first_row, micro_batch, T).narrow(1, 0, T);
    }
    if (dataset_->has_loss_mask()) {
      const at::Tensor carries_loss =
          dataset_->loss_mask_rows(split, batch, first_row, micro_batch, T);
      out.targets = out.targets.masked_fill(carries_loss.eq(0), GPT::kIgnoredTarget);
    }
    if (mesh_.shape().cp > 1) {
      out.input = context_shard(out.input, mesh_.coords().cp, mesh_.shape().cp);
      out.targets = context_shard(out.targets, mesh_.coords().cp, mesh_.shape().cp);
      if (out.documents.defined()) {
        out.documents = context_shard(out.documents, mesh_.coords().cp, mesh_.shape().cp);
      }
    }
    return out;
  };
}

void Trainer::log_samples(int64_t step, int64_t first_row, const at::Tensor& rows) const {
  const char* attempt = std::getenv("STRATA_ATTEMPT");  // set by the supervisor
  nlohmann::json record = {{"attempt", attempt ? std::atoll(attempt) : 0}, {"step", step + 1}};
  const at::Tensor tokens = rows.contiguous();
  const int64_t row_bytes = tokens.size(1) * static_cast<int64_t>(tokens.element_size());
  const char* data = static_cast<const char*>(tokens.data_ptr());
  nlohmann::json list = nlohmann::json::array();
  for (int64_t row = 0; row < tokens.size(0); ++row) {
    const std::string_view bytes(data + row * row_bytes, static_cast<size_t>(row_bytes));
    list.push_back({first_row + row, hex64(fnv1a(bytes))});
  }
  record["rows"] = std::move(list);
  *samples_ << record.dump() << std::endl;  // flushed: a killed rank keeps what it trained
}

double Trainer::loss_weight(Split split, int64_t batch, int64_t* loss_tokens) const {
  // The model's loss is a sum over the targets that carry loss divided by all targets; the
  // weight makes it the mean over those that carry loss, in the whole global batch (every
  // rank counts the same rows), so every layout trains on the same objective. A batch
  // without any such token has no loss and no gradient.
  const int64_t rows = config_.train.global_batch, T = config_.model.seq_len;
  *loss_tokens = dataset_->loss_tokens(split, batch, rows, T);
  if (!dataset_->has_loss_mask()) return 1.0;
  return *loss_tokens == 0 ? 0.0
                           : static_cast<double>(rows * T) / static_cast<double>(*loss_tokens);
}

double Trainer::global_mean_loss(double last_stage_mean) {
  // The loss lives on the last stage (zero elsewhere): sum over pp, mean over dp and cp
  // (each cp rank's mean is over the same number of tokens).
  at::Tensor loss = at::tensor({last_stage_mean}, at::kDouble);
  mesh_.pp().all_reduce(loss, ReduceOp::Sum);
  mesh_.dp_cp().all_reduce(loss, ReduceOp::Avg);
  return loss.item<double>();
}

Trainer::StepResult Trainer::train_step(int64_t step) {
  Trace::Scope scope(*trace_, "step", step);
  StepResult result;
  result.loss_scale = loss_scaler_.scale();
  executor_->set_loss_scale(result.loss_scale);
  executor_->set_loss_weight(loss_weight(Split::Train, step, &result.loss_tokens));
  data_parallel_->begin_step(step);
  for (auto& chunk : chunks_) chunk->take_moe_stats();  // drop evaluation's
  const PipelineStepStats pipeline = executor_->run(microbatches_of(Split::Train, step), step);
  {
    Trace::Scope finish(*trace_, "finish_gradients", step);
    data_parallel_->finish_gradients();  // the last buckets; most ran during backward
  }
  if (gradient_hook_) gradient_hook_(step);
  {
    Trace::Scope update(*trace_, "clip_and_update", step);
    result.lr = learning_rate(config_.train, step);
    // fp16: a step whose gradients overflowed on any rank is skipped everywhere (the learning
    // rate schedule still advances); the others are unscaled as they are clipped.
    result.skipped =
        loss_scaler_.update(loss_scaler_.enabled() && data_parallel_->gradients_overflowed());
    if (result.skipped) {
      result.grad_norm = std::numeric_limits<double>::quiet_NaN();
    } else {
      result.grad_norm =
          data_parallel_->clip_gradients(config_.train.grad_clip, 1.0 / result.loss_scale);
      data_parallel_->step(result.lr);
    }
  }
  result.loss = global_mean_loss(pipeline.loss);
  at::Tensor wait = at::tensor({pipeline.wait_s}, at::kDouble);
  mesh_.pp().all_reduce(wait, ReduceOp::Max);
  result.receive_wait_s = wait.item<double>();
  result.peak_inflight = pipeline.peak_inflight;
  result.moe = collect_moe_stats();
  return result;
}

MoeStepStats Trainer::collect_moe_stats() {
  // Per global layer: load (E), assignments, dropped, sequences, aux * sequences,
  // z * sequences; summed over this step's forwards, then over dp and cp (different tokens) and pp
  // (different layers). tp ranks hold replicas: not summed.
  const ModelConfig& model = config_.model;
  MoeStepStats out;
  if (model.moe.num_experts == 0) return out;
  const int64_t E = model.moe.num_experts, width = E + 5;
  std::vector<double> local(static_cast<size_t>(model.n_layers * width), 0.0);
  for (auto& chunk : chunks_) {
    for (const MoeLayerStats& layer : chunk->take_moe_stats()) {
      double* row = local.data() + layer.layer * width;
      for (int64_t e = 0; e < E; ++e) row[e] += static_cast<double>(layer.load[e]);
      const double sequences = static_cast<double>(layer.sequences);
      row[E] += static_cast<double>(layer.assignments);
      row[E + 1] += static_cast<double>(layer.dropped);
      row[E + 2] += sequences;
      row[E + 3] += layer.aux_loss * sequences;
      row[E + 4] += layer.z_loss * sequences;
    }
  }
  at::Tensor sums = at::tensor(local, at::kDouble);
  mesh_.dp_cp().all_reduce(sums, ReduceOp::Sum);
  mesh_.pp().all_reduce(sums, ReduceOp::Sum);
  const double* total = sums.data_ptr<double>();
  double assignments = 0, dropped = 0;
  for (int64_t layer = 0; layer < model.n_layers; ++layer) {
    if (!model.is_moe_layer(layer)) continue;
    const double* row = total + layer * width;
    out.layers.push_back(layer);
    out.load.emplace_back();
    double max_load = 0, sum_load = 0;
    for (int64_t e = 0; e < E; ++e) {
      out.load.back().push_back(std::llround(row[e]));
      max_load = std::max(max_load, row[e]);
      sum_load += row[e];
    }
    assignments += row[E];
    dropped += row[E + 1];
    out.aux_loss += row[E + 3] / row[E + 2];
    out.z_loss += row[E + 4] / row[E + 2];
    out.load_imbalance += max_load / (sum_load / static_cast<double>(E));
  }
  out.dropped_fraction = dropped / assignments;
  out.load_imbalance /= static_cast<double>(out.layers.size());
  return out;
}

double Trainer::evaluate() {
  // Forward only, through the same pipeline: eval_batches fixed global batches of the
  // held-out split.
  at::NoGradGuard no_grad;
  double loss = 0;
  for (int64_t batch = 0; batch < config_.train.eval_batches; ++batch) {
    int64_t loss_tokens = 0;
    eval_executor_->set_loss_weight(loss_weight(Split::Eval, batch, &loss_tokens));
    loss += eval_executor_->run(microbatches_of(Split::Eval, batch), batch).loss;
  }
  for (auto& chunk : chunks_) chunk->take_moe_stats();  // training steps report MoE stats
  return global_mean_loss(loss / static_cast<double>(config_.train.eval_batches));
}

double Trainer::save(int64_t steps_done, TrainResult& result) {
  const auto start = Clock::now();
  nlohmann::json state = {
      {"step", steps_done},          {"optimizer_steps", data_parallel_->optimizer().step_count()},
      {"seed", config_.train.seed},  {"loss_scaler", loss_scaler_.state()},
      {"layout", mesh_.to_string()}, {"world_size", mesh_.shape().world()},
      {"config", to_toml(config_)}};
  const CheckpointConfig& checkpoint = config_.checkpoint;
  std::vector<ShardedTensor> tensors = data_parallel_->checkpoint_tensors(/*for_load=*/false);
  if (async_checkpointer_) {
    async_checkpointer_->save(checkpoint.dir, steps_done, tensors, state, checkpoint.keep);
  } else {
    CheckpointSave save(checkpoint.dir, steps_done, *checkpoint_group_, checkpoint.keep);
    result.last_checkpoint = save.commit(
        [&] {
          nlohmann::json record = save.write(tensors);
          inject_fault("save", steps_done, mesh_.rank());
          return record;
        },
        state);
  }
  data_parallel_->checkpoint_done(/*loaded=*/false);
  return seconds_since(start);
}

namespace {

// Runs `action` on every rank; "" when it succeeded everywhere, else the first failing
// rank's UserError message, the same on every rank. Collective over `group`.
std::string first_failure_on_any_rank(CheckpointGroup& group, const std::function<void()>& action) {
  std::string failure;
  try {
    action();
  } catch (const UserErrorOnEveryRank&) {
    throw;
  } catch (const UserError& error) {
    failure = error.what();
  }
  const std::vector<std::string> failures = group.all_gather_bytes(failure);
  for (size_t rank = 0; rank < failures.size(); ++rank) {
    if (!failures[rank].empty()) {
      return failures.size() > 1 ? str(failures[rank], " (on rank ", rank, ")") : failures[rank];
    }
  }
  return "";
}

}  // namespace

int64_t Trainer::maybe_resume() {
  const CheckpointConfig& checkpoint = config_.checkpoint;
  const bool automatic = checkpoint.resume == "auto";
  if (checkpoint.resume == "none" || (automatic && checkpoint.dir.empty())) return 0;
  // Rank 0's listing, so that every rank tries the same directories in the same order.
  std::vector<std::string> candidates = {checkpoint.resume};
  if (automatic) {
    std::string listing;
    if (mesh_.rank() == 0) {
      for (const std::string& dir : list_checkpoints(checkpoint.dir)) listing += dir + "\n";
    }
    listing = checkpoint_group_->all_gather_bytes(listing)[0];
    candidates.clear();
    for (size_t start = 0, end; (end = listing.find('\n', start)) != std::string::npos;
         start = end + 1) {
      candidates.push_back(listing.substr(start, end - start));
    }
    if (candidates.empty()) return 0;
  }
  std::vector<ShardedTensor> tensors = data_parallel_->checkpoint_tensors(/*for_load=*/true);
  for (const std::string& dir : candidates) {
    nlohmann::json state;
    std::string failure =
        first_failure_on_any_rank(*checkpoint_group_, [&] { state = read_checkpoint_state(dir); });
    if (failure.empty()) {
      Config saved = parse_config(state.at("config").get<std::string>(), dir + "/state.json");
      Config saved_model, this_model;
      saved_model.model = saved.model;
      saved_model.model.attention = config_.model.attention;  // how it computes, not which model
      this_model.model = config_.model;
      if (to_toml(saved_model) != to_toml(this_model)) {
        throw UserErrorOnEveryRank(str("checkpoint ", dir,
                                       " was written for a different [model] section; resume it "
                                       "with the same model, or set checkpoint.resume = \"none\""));
      }
      failure = first_failure_on_any_rank(*checkpoint_group_, [&] {
        at::NoGradGuard no_grad;
        load_checkpoint(dir, tensors);
      });
    }
    if (failure.empty()) {
      data_parallel_->checkpoint_done(/*loaded=*/true);
      data_parallel_->optimizer().set_step_count(state.at("optimizer_steps").get<int64_t>());
      loss_scaler_.load_state(state.value("loss_scaler", nlohmann::json()));
      return state.at("step").get<int64_t>();
    }
    if (!automatic) throw UserErrorOnEveryRank(failure);
    if (mesh_.rank() == 0) {
      std::cerr << "strata: warning: skipping checkpoint " << dir << ": " << failure << std::endl;
    }
  }
  throw UserErrorOnEveryRank(
      str("no usable checkpoint in ", checkpoint.dir, ": all ", candidates.size(),
          " failed verification (see the warnings above); remove them, or set "
          "checkpoint.resume = \"none\" to start from step 0"));
}

StepMetrics Trainer::step_metrics(int64_t step, const StepResult& result, double step_time_s,
                                  int64_t live_bytes_before) const {
  const int64_t tokens_per_step = config_.train.global_batch * config_.model.seq_len;
  const double flops_per_step = training_flops_per_token(config_.model.shape()) * tokens_per_step;
  const double peak_total = peak_flops_ * static_cast<double>(mesh_.shape().world());
  StepMetrics m;
  m.step = step + 1;
  m.loss = result.loss;
  m.lr = result.lr;
  m.grad_norm = result.grad_norm;
  m.step_time_s = step_time_s;
  m.tokens_per_s = tokens_per_step / step_time_s;
  m.mfu = flops_per_step / step_time_s / peak_total;
  m.tokens = tokens_per_step * m.step;
  m.loss_tokens = result.loss_tokens;
  m.bubble_fraction = result.receive_wait_s / step_time_s;
  m.mem = {data_parallel_->parameter_bytes(), data_parallel_->gradient_bytes(),
           data_parallel_->optimizer_bytes(), tracked_bytes_peak() - live_bytes_before,
           rss_peak_bytes()};
  m.dp_buckets = data_parallel_->buckets();
  m.dp_buckets_overlapped = data_parallel_->buckets_overlapped();
  const CommCounters& counters = mesh_.world().counters();
  m.comm = per_kind_json(counters.bytes);
  m.comm_uncompressed =
      per_kind_json(data_parallel_->compressed_traffic().without_compression(counters.bytes));
  m.comm_wait = per_kind_json(counters.wait_s);
  m.comm_share = counters.total_wait_s() / step_time_s;
  m.loss_scaling = loss_scaler_.enabled();
  m.loss_scale = result.loss_scale;
  m.skipped = result.skipped;
  m.skipped_steps = loss_scaler_.skipped_steps();
  if (config_.model.moe.num_experts > 0) {
    const MoeStepStats& moe = result.moe;
    m.moe = {{"load", moe.load},
             {"load_imbalance", moe.load_imbalance},
             {"dropped_fraction", moe.dropped_fraction},
             {"aux_loss", moe.aux_loss},
             {"z_loss", moe.z_loss}};
  }
  return m;
}

TrainResult Trainer::run() {
  const bool is_rank0 = mesh_.rank() == 0;
  Progress progress(config_.log.progress, config_.train.steps, config_.log.every, is_rank0);
  TrainResult result;
  result.first_step = maybe_resume();
  MetricsLog metrics(config_.log.dir, is_rank0, result.first_step);
  if (result.first_step > 0) {
    progress.message(str("resumed from step ", result.first_step, " of ", config_.checkpoint.dir));
  }
  progress.message(str("strata: ", mesh_.to_string(), " | model ", num_parameters(),
                       " parameters | ", config_.train.global_batch, " x ", config_.model.seq_len,
                       " tokens per step"));
  Watchdog watchdog(config_.fault.step_timeout_s, mesh_.rank());
  if (config_.log.profile_step > 0 && config_.log.profile_step <= result.first_step) {
    progress.message(str("strata: log.profile_step ", config_.log.profile_step,
                         " ran before the resumed step ", result.first_step + 1,
                         "; nothing is profiled"));
  }

  for (int64_t step = result.first_step; step < config_.train.steps; ++step) {
    inject_fault("step", step, mesh_.rank());
    mesh_.world().counters().reset();
    reset_tracked_peak();
    const int64_t live_before = tracked_bytes_now();
    const auto start = Clock::now();
    std::optional<StepProfile> profile;
    if (step + 1 == config_.log.profile_step) {
      profile.emplace(config_.log.dir, step + 1, mesh_.rank());
    }
    const StepResult step_result = train_step(step);
    StepMetrics m = step_metrics(step, step_result, seconds_since(start), live_before);
    if (profile) {
      const std::string table = profile->finish(m.step_time_s);
      if (mesh_.rank() == 0)
        progress.message("strata: step " + std::to_string(m.step) + " profiled: " + table +
                         " (and .json, a Chrome trace; each rank its own)");
    }
    if (async_checkpointer_) {
      const std::string committed = async_checkpointer_->poll();
      if (!committed.empty()) result.last_checkpoint = committed;
    }

    const bool last = m.step == config_.train.steps;
    const bool due = config_.checkpoint.every > 0 && m.step % config_.checkpoint.every == 0;
    if (!config_.checkpoint.dir.empty() && (due || last)) {
      Trace::Scope scope(*trace_, "checkpoint", step);
      m.checkpoint_stall_s = save(m.step, result);
    }
    metrics.write(to_json(m));
    progress.update(m);
    result.losses.push_back(step_result.loss);
    result.metrics.push_back(m);
    result.grad_norms.push_back(step_result.grad_norm);
    result.peak_inflight.push_back(step_result.peak_inflight);
    if (config_.model.moe.num_experts > 0) result.moe.push_back(step_result.moe);

    if (config_.train.eval_every > 0 && (m.step % config_.train.eval_every == 0 || last)) {
      Trace::Scope scope(*trace_, "evaluate", step);
      const double eval_loss = evaluate();
      result.eval_losses.push_back(eval_loss);
      metrics.write({{"step", m.step}, {"eval_loss", eval_loss}});
      progress.eval(m.step, eval_loss);
    }
    watchdog.beat(m.step);
  }
  if (async_checkpointer_) {
    const std::string committed = async_checkpointer_->finish();
    if (!committed.empty()) result.last_checkpoint = committed;
  }
  progress.finish();
  trace_->write(config_.log.dir, mesh_.world());
  return result;
}

}  // namespace strata
