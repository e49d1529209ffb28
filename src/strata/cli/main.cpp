// The `strata` binary: train, config, generate, serve, data prepare. User errors print one clear
// message and exit 2; a failure on one rank of a running job aborts the whole job instead of
// leaving the other ranks waiting; `train --nproc N` supervises its job and restarts it.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "strata/ckpt/checkpoint.h"
#include "strata/cli/env.h"
#include "strata/cli/plan.h"
#include "strata/cli/simulate.h"
#include "strata/cli/supervisor.h"
#include "strata/cli/tokenize.h"
#include "strata/core/config.h"
#include "strata/core/error.h"
#include "strata/core/memory.h"
#include "strata/data/chat_template.h"
#include "strata/data/prepare.h"
#include "strata/data/tokenizer.h"
#include "strata/dist/flight_record.h"
#include "strata/dist/launcher.h"
#include "strata/dist/mesh.h"
#include "strata/dist/runtime.h"
#include "strata/hf/hf_config.h"
#include "strata/hf/hf_export.h"
#include "strata/infer/generate.h"
#include "strata/model/product_routes.h"
#include "strata/plan/calibrate.h"
#include "strata/plan/layer_profile.h"
#include "strata/plan/search.h"
#include "strata/plan/stage_split.h"
#include "strata/serve/serve.h"
#include "strata/train/trainer.h"

namespace strata {
namespace {

// A UserError of a step every rank runs alike (the config, the layout), reported once.
template <typename Action>
auto alike_on_every_rank(Action action) {
  try {
    return action();
  } catch (const UserErrorOnEveryRank&) {
    throw;
  } catch (const UserError& error) {
    throw UserErrorOnEveryRank(error.what());
  }
}

// Runs body(world_size, &rank) on every rank of the job with MPI initialized. A user error
// reaches the user once, whichever rank raised it: one every rank raised alike
// (UserErrorOnEveryRank) is printed by rank 0, any other by the rank that raised it; the job
// exits 2. Any other failure on one rank is printed by that rank, with the flight record of
// its last communication written, and aborts the whole job (exit 1) so no rank is left
// waiting.
int run_on_ranks(const std::function<void(int, int*)>& body) {
  int argc = 0;
  char** no_args = nullptr;
  const int world_size = init_mpi(&argc, &no_args);
  install_cpu_allocator();
  int rank = 0;
  try {
    body(world_size, &rank);
  } catch (const UserError& error) {
    const bool alike = dynamic_cast<const UserErrorOnEveryRank*>(&error) != nullptr;
    if (world_size == 1 || (alike && rank == 0)) {
      std::cerr << "strata: error: " << error.what() << std::endl;
    } else if (!alike) {
      std::cerr << "strata: error: rank " << rank << ": " << error.what() << std::endl;
    }
    if (world_size > 1) {
      // Rank 0 reports an error raised alike and its abort ends the job; the others wait for
      // it (bounded), so that their abort cannot kill rank 0 before it has printed the message.
      if (alike && rank != 0) std::this_thread::sleep_for(std::chrono::seconds(30));
      abort_job(2);
    }
    finalize_mpi();
    return 2;
  } catch (const std::exception& error) {
    const std::string record = write_flight_record(error.what());
    std::cerr << "strata: rank " << rank << ": " << error.what()
              << (record.empty() ? "" : "; flight record " + record) << std::endl;
    abort_job(1);
  }
  finalize_mpi();
  return 0;
}

// Where `strata train` starts its ranks: --nproc on this machine, or on --hosts/--hostfile.
struct TrainLaunch {
  int nproc = 0;
  std::string hosts, hostfile, iface;

  LaunchTarget target() const {
    LaunchTarget target{nproc, {}, iface};
    if (!hostfile.empty()) target.hosts = read_hostfile(hostfile);
    if (!hosts.empty()) target.hosts = parse_hosts(hosts, "--hosts");
    STRATA_REQUIRE(iface.empty() || !target.hosts.empty(),
                   "--iface needs --hosts or --hostfile (on one machine ranks share memory)");
    return target;
  }
};

int run_train(const std::string& config_path, const std::vector<std::string>& overrides,
              const TrainLaunch& launch, const std::vector<std::string>& argv) {
  Config config = with_hf_model(load_config(config_path, overrides));
  const LaunchTarget target = launch.target();
  if (target.world() > 0 && !started_by_mpi_launcher()) {
    // Every config error before any rank starts (with parallel.auto, all but the layout's).
    const Config validated = validate_config(config, target.world());
    // mpirun gives ranks a pseudo-terminal: tell them what the user's stdout really is.
    setenv("STRATA_STDOUT_IS_TTY", isatty(STDOUT_FILENO) ? "1" : "0", 1);
    if (target.world() > 1 || !target.hosts.empty()) {
      return supervise_training(validated, target, argv);
    }
  }
  return run_on_ranks([&](int world_size, int* rank) {
    config = alike_on_every_rank([&] { return validate_config(config, world_size); });
    Comm world = Comm::world(config.parallel.comm_timeout_s);
    *rank = world.rank();
    configure_rank_threads(static_cast<int>(config.train.threads));
    if (config.parallel.auto_layout) {
      std::string note;
      const ClusterProfile local = local_profile_on_ranks(world, &note);
      const AutoLayout choice =
          alike_on_every_rank([&] { return choose_layout(config, world_size, local); });
      if (world.rank() == 0) std::cout << choice.explanation << " (" << note << ")" << std::endl;
      config = alike_on_every_rank([&] { return validate_config(choice.config, world_size); });
    }
    if (config.parallel.pp_layers.automatic) {
      std::string note;
      config =
          alike_on_every_rank([&] { return resolve_pp_layers_on_ranks(world, config, &note); });
      if (world.rank() == 0) std::cout << note << std::endl;
    }
    if (world.rank() == 0 && config.train.recompute == Recompute::selective &&
        !selective_recomputes_attention(config.model.attention, config.parallel.cp > 1)) {
      std::cout << "strata train: train.recompute = \"selective\" runs as \"none\" here: the "
                   "blockwise attention kernel keeps no scores to drop (its output is the "
                   "out-projection's input); \"full\" trades compute for memory"
                << std::endl;
    }
    Mesh mesh(world, mesh_shape_of(config.parallel));
    // Building the model and opening the data read the same config and files on every rank.
    auto trainer = alike_on_every_rank([&] { return std::make_unique<Trainer>(config, mesh); });
    trainer->run();
  });
}

int run_config(const std::string& config_path, const std::vector<std::string>& overrides,
               int world_size) {
  Config config = validate_config(with_hf_model(load_config(config_path, overrides)), world_size);
  if (config.parallel.pp_layers.automatic) {
    const std::string path = local_profile_path();
    STRATA_REQUIRE(std::filesystem::exists(path),
                   "parallel.pp_layers = \"auto\" splits the stages by their time on this "
                   "machine, and it has no local profile at ",
                   path, " yet: run `strata plan calibrate` (with --profile-layers ", config_path,
                   " to time this model's layers), or `strata train`, which measures it");
    std::string note;
    config = resolve_pp_layers(config, load_cluster("local"),
                               load_layer_profile(layer_profile_path()), &note);
    std::cout << "# " << note << "\n";
  }
  std::cout << to_toml(config);
  return 0;
}

// The tokenizer a model's text goes through: a Hugging Face directory's own (nullptr when it
// holds no tokenizer files: its prompts are then token ids), or the one a strata checkpoint
// was trained with (data.tokenizer).
std::unique_ptr<Tokenizer> model_tokenizer(const std::string& checkpoint, const Config& config) {
  if (is_hf_directory(checkpoint)) {
    return holds_tokenizer(checkpoint) ? load_tokenizer(checkpoint) : nullptr;
  }
  return make_tokenizer(config.data.tokenizer);
}

// The tokens that end a completion: the tokenizer's end of text and, for a Hugging Face
// directory or a checkpoint fine-tuned from one (model.init), the model's eos_token_id
// (generation_config.json, else config.json); each once.
std::vector<int64_t> model_stop_token_ids(const std::string& checkpoint, const Config& config,
                                          const Tokenizer* tokenizer) {
  std::vector<int64_t> ids;
  if (tokenizer && tokenizer->end_of_text_id()) ids.push_back(*tokenizer->end_of_text_id());
  const std::string hf_dir = is_hf_directory(checkpoint) ? checkpoint : config.model_init;
  if (!hf_dir.empty() && is_hf_directory(hf_dir)) {
    for (const int64_t id : hf_eos_token_ids(hf_dir)) {
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
  }
  return ids;
}

// The ids of --prompt-ids: integers separated by commas ("1,2,3").
std::vector<int64_t> parse_prompt_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    size_t used = 0;
    int64_t id = -1;
    try {
      id = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    STRATA_REQUIRE(used == item.size() && used > 0 && id >= 0, "--prompt-ids: '", item,
                   "' is not a token id; give non-negative integers separated by commas, e.g. "
                   "--prompt-ids 1,2,3");
    ids.push_back(id);
  }
  STRATA_REQUIRE(!ids.empty(), "--prompt-ids needs at least one id, e.g. --prompt-ids 1,2,3");
  return ids;
}

struct GenerateFlags {
  std::string checkpoint, prompt = "\n", prompt_ids, precision;
  SamplingOptions sampling;
  bool json = false;  // one JSON object: the ids and the log-probability of each new token
  bool ignore_eos = false;
  int nproc = 0;
};

// Generation on one process, or with the model split over every rank (tensor parallel):
// all ranks sample the same tokens, rank 0 prints them.
int run_generate(const GenerateFlags& flags, const std::vector<std::string>& argv) {
  if (flags.nproc > 1 && !started_by_mpi_launcher()) relaunch_under_mpirun(flags.nproc, argv);
  return run_on_ranks([&](int, int* rank) {
    Comm world = Comm::world();
    *rank = world.rank();
    configure_rank_threads(0);
    Config config;
    std::optional<Precision> compute;
    if (!flags.precision.empty()) {
      compute = parse_choice<Precision>(flags.precision);
      STRATA_REQUIRE(compute, "--precision must be one of ", spellings_joined<Precision>(),
                     ", got '", flags.precision, "'");
    }
    auto model = load_model_from_checkpoint(flags.checkpoint, &config, &world, compute);
    {  // the products of `strata serve` on as many tensor-parallel ranks: chosen alike
      Config served = config;
      served.parallel.tp = world.size();
      choose_product_routes(world, served, serving_products(served));
    }
    const auto tokenizer = model_tokenizer(flags.checkpoint, config);
    std::vector<int64_t> prompt_tokens;
    if (!flags.prompt_ids.empty()) {
      prompt_tokens = parse_prompt_ids(flags.prompt_ids);
    } else {
      STRATA_REQUIRE(tokenizer, flags.checkpoint, " holds no tokenizer files (tokenizer.json, ",
                     "vocab.json + merges.txt or tokenizer.model): give the prompt as token ids ",
                     "with --prompt-ids");
      std::vector<int32_t> encoded = tokenizer->encode(flags.prompt);
      prompt_tokens.assign(encoded.begin(), encoded.end());
    }
    SamplingOptions sampling = flags.sampling;
    if (!flags.ignore_eos) {
      sampling.stop_token_ids = model_stop_token_ids(flags.checkpoint, config, tokenizer.get());
    }
    const Generated output = generate(*model, prompt_tokens, sampling);
    if (*rank != 0) return;
    // A final end-of-text token is in the ids, not in the text.
    std::vector<int64_t> new_text = output.tokens;
    if (!new_text.empty() && sampling.ends_generation(new_text.back())) new_text.pop_back();
    // Without a tokenizer the ids are the output (--json; plain text shows them too).
    auto text = [&](const std::vector<int64_t>& ids) {
      if (tokenizer) return tokenizer->decode(ids);
      std::string out;
      for (const int64_t id : ids) out += str(out.empty() ? "" : " ", id);
      return out;
    };
    if (flags.json) {
      nlohmann::json line = {{"prompt_ids", prompt_tokens},
                             {"generated_ids", output.tokens},
                             {"logprobs", output.logprobs},
                             {"text", tokenizer ? text(new_text) : ""}};
      std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
    } else {
      std::cout << text(prompt_tokens) << (tokenizer ? "" : " | ")
                << text(tokenizer ? new_text : output.tokens) << std::endl;
    }
  });
}

struct ExportFlags {
  std::string checkpoint, out, shard_size, dtype;
};

// A checkpoint of any layout (or a Hugging Face directory) as a Hugging Face model directory,
// on this process alone: the whole model is read into memory once.
int run_export(const ExportFlags& flags) {
  HfExportOptions options;
  if (!flags.shard_size.empty())
    options.shard_size = parse_byte_size(flags.shard_size, "--shard-size");
  if (!flags.dtype.empty()) options.torch_dtype = parse_torch_dtype(flags.dtype, "--dtype");
  Config config;
  auto model = load_model_from_checkpoint(flags.checkpoint, &config, nullptr, Precision::fp32);
  export_hf_model(*model, flags.out, options, config.model_init);
  std::cout << "strata export: wrote " << flags.out << std::endl;
  return 0;
}

struct ServeFlags {
  std::string checkpoint, host, api_key, chat_template;
  std::vector<std::string> overrides;
  int port = -1;  // -1 = serve.port
  int nproc = 0;
};

// The template /v1/chat/completions renders conversations with: `file` (--chat-template), else
// the directory's tokenizer_config.json chat_template; nullptr when there is none (the chat API
// then answers 400 saying so). A template outside the supported subset fails here, at startup.
std::unique_ptr<ChatTemplate> model_chat_template(const std::string& checkpoint,
                                                  const std::string& file) {
  if (file.empty()) {
    std::ifstream in(checkpoint + "/tokenizer_config.json");
    if (!in) return nullptr;
    const nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
    if (config.is_discarded() || !config.is_object() || !config.contains("chat_template") ||
        config["chat_template"].is_null()) {
      return nullptr;
    }
  }
  return std::make_unique<ChatTemplate>(ChatTemplate::from_model_dir(checkpoint, file));
}

// The HTTP server: rank 0 listens and schedules, every rank holds its stage of the model
// (tensor parallel over parallel.tp, pipeline over parallel.pp). SIGINT or SIGTERM on rank 0
// (mpirun forwards them) stops it after the current step.
int run_serve(const ServeFlags& flags, const std::vector<std::string>& argv) {
  std::vector<std::string> overrides = flags.overrides;
  if (!flags.host.empty()) overrides.push_back("serve.host=" + flags.host);
  if (flags.port >= 0) overrides.push_back("serve.port=" + std::to_string(flags.port));
  const Config checkpoint_config = checkpoint_run_config(flags.checkpoint);
  if (flags.nproc > 0 && !started_by_mpi_launcher()) {
    serving_config(checkpoint_config, overrides, flags.nproc);  // every error before launching
    if (flags.nproc > 1) {
      // The ranks read the key from the environment (mpirun forwards it): it never shows in
      // their command lines.
      if (!flags.api_key.empty()) setenv("STRATA_API_KEY", flags.api_key.c_str(), 1);
      relaunch_under_mpirun(flags.nproc, without_option(argv, "--api-key"));
    }
  }
  // The signals go to a thread of their own that stops the engine; every other thread has
  // them blocked (set before any thread starts).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return run_on_ranks([&](int world_size, int* rank) {
    const Config config = serving_config(checkpoint_config, overrides, world_size);
    Comm world = Comm::world(config.parallel.comm_timeout_s);
    *rank = world.rank();
    configure_rank_threads(static_cast<int>(config.serve.threads));
    Mesh mesh(world, mesh_shape_of(config.parallel));
    const auto tokenizer = model_tokenizer(flags.checkpoint, config);
    const auto chat_template = model_chat_template(flags.checkpoint, flags.chat_template);
    ServeOptions options;
    options.chat_template = chat_template.get();
    options.model_name = flags.checkpoint;
    options.tokenizer = tokenizer.get();
    options.stop_token_ids = model_stop_token_ids(flags.checkpoint, config, tokenizer.get());
    options.api_key = flags.api_key;
    options.on_listening = [&](int port) {
      std::cout << "strata serve: listening on http://" << config.serve.host << ":" << port
                << " (loading " << flags.checkpoint << ")" << std::endl;
      if (flags.api_key.empty() && !is_loopback(config.serve.host)) {
        std::cerr << "strata serve: warning: " << config.serve.host
                  << " is reachable from other machines and there is no API key: anyone who can "
                     "reach port "
                  << port << " can use the model (set --api-key or STRATA_API_KEY)" << std::endl;
      }
    };
    ServeSession session(mesh, config, options, [&](const StageSpec& stage, Comm* tp) {
      return load_stage_from_checkpoint(flags.checkpoint, config, tp, stage);
    });
    if (*rank == 0) {
      std::cout << "strata serve: ready: " << mesh.to_string() << ", " << session.num_blocks()
                << " KV cache blocks of " << kBlockTokens << " tokens, prefix caching "
                << (config.serve.prefix_cache ? "on" : "off") << std::endl;
    }
    // Rank 0: a thread waits for SIGINT or SIGTERM and stops the engine. Leaving this scope
    // any other way (an error), the watcher is woken by a signal of our own and joined.
    struct SignalWatcher {
      std::thread thread;
      ~SignalWatcher() {
        if (!thread.joinable()) return;
        pthread_kill(thread.native_handle(), SIGTERM);
        thread.join();
      }
    } watcher;
    if (*rank == 0) {
      watcher.thread = std::thread([&session, signals] {
        int received = 0;
        sigwait(&signals, &received);
        session.stop();
      });
    }
    session.run();
  });
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  using namespace strata;
  CLI::App app{"strata: train and serve transformer models split across many processes"};
  app.require_subcommand(1);

  std::string config_path;
  std::vector<std::string> overrides;
  TrainLaunch launch;
  auto* train = app.add_subcommand("train", "Train a model described by a TOML config");
  train->add_option("config", config_path, "Config file (TOML)")->required();
  train->add_option("--set", overrides, "Override a key: section.key=value (repeatable)");
  train
      ->add_option("--nproc", launch.nproc,
                   "Start N ranks (re-executes under mpirun): here, or with --hosts/--hostfile "
                   "on those hosts (default: one per slot)")
      ->check(CLI::PositiveNumber);
  auto* hostfile = train->add_option("--hostfile", launch.hostfile,
                                     "Open MPI hostfile of the hosts to run on (NAME slots=N)");
  train->add_option("--hosts", launch.hosts, "Hosts to run on: NAME:SLOTS,... (e.g. a:2,b:2)")
      ->excludes(hostfile);
  train->add_option("--iface", launch.iface,
                    "With hosts: the network interface or subnet (10.0.0.0/24) ranks use");

  int world_size = 1;
  auto* config = app.add_subcommand("config", "Print the effective, validated config");
  config->add_option("config", config_path, "Config file (TOML)")->required();
  config->add_option("--set", overrides, "Override a key: section.key=value (repeatable)");
  config->add_option("--ranks", world_size, "Validate for N ranks (what train --nproc N starts)")
      ->check(CLI::PositiveNumber);
  std::string old_nproc;  // the old name: an error, since --nproc launches ranks everywhere else
  config->add_option("--nproc", old_nproc)->group("");

  GenerateFlags generate_flags;
  SamplingOptions& sampling = generate_flags.sampling;
  auto* generate_command = app.add_subcommand("generate", "Sample text from a checkpoint");
  generate_command
      ->add_option("--checkpoint", generate_flags.checkpoint,
                   "Checkpoint directory (step_*) or Hugging Face model directory")
      ->required();
  auto* prompt_text = generate_command->add_option("--prompt", generate_flags.prompt,
                                                   "Text to continue (default: a newline)");
  generate_command
      ->add_option("--prompt-ids", generate_flags.prompt_ids,
                   "Token ids to continue, separated by commas (instead of --prompt)")
      ->excludes(prompt_text);
  generate_command->add_option("--max-new-tokens", sampling.max_new_tokens, "Tokens to generate")
      ->check(CLI::NonNegativeNumber);
  generate_command->add_option("--temperature", sampling.temperature, "0 = greedy")
      ->check(CLI::NonNegativeNumber);
  generate_command->add_option("--top-k", sampling.top_k, "Sample among the k likeliest (0 = all)")
      ->check(CLI::NonNegativeNumber);
  generate_command
      ->add_option("--top-p", sampling.top_p,
                   "Sample among the likeliest tokens whose probability reaches p (1 = all)")
      ->check(CLI::Range(0.0, 1.0).description("in (0, 1]"))
      ->check(CLI::PositiveNumber);
  generate_command->add_option("--seed", sampling.seed, "Sampling seed");
  generate_command->add_flag(
      "--json", generate_flags.json,
      "Print one JSON object: prompt_ids, generated_ids, logprobs (of each generated token "
      "under the model's distribution) and text");
  generate_command->add_flag("--ignore-eos", generate_flags.ignore_eos,
                             "Generate --max-new-tokens tokens even past the model's end of text");
  generate_command->add_option("--precision", generate_flags.precision,
                               "Compute in " + spellings_joined<Precision>(", ") +
                                   " (default: the precision it was trained in)");
  generate_command
      ->add_option("--nproc", generate_flags.nproc,
                   "Run the model split over N local ranks (tensor parallel)")
      ->check(CLI::PositiveNumber);

  ServeFlags serve_flags;
  auto* serve = app.add_subcommand(
      "serve", "Serve a checkpoint over HTTP (OpenAI completions API, continuous batching)");
  serve
      ->add_option("--checkpoint", serve_flags.checkpoint,
                   "Checkpoint directory (step_*) or Hugging Face model directory")
      ->required();
  serve
      ->add_option("--nproc", serve_flags.nproc,
                   "Start N local ranks (tensor parallel, or pipeline with --set parallel.pp)")
      ->check(CLI::PositiveNumber);
  serve->add_option("--set", serve_flags.overrides,
                    "Override a key: section.key=value (repeatable), e.g. parallel.pp=2");
  serve->add_option("--host", serve_flags.host, "Address to bind (serve.host; 127.0.0.1)");
  serve->add_option("--port", serve_flags.port, "TCP port (serve.port; 0 = any free port)")
      ->check(CLI::Range(0, 65535));
  serve
      ->add_option("--api-key", serve_flags.api_key,
                   "Require `Authorization: Bearer KEY` on every /v1/ request (401 otherwise)")
      ->envname("STRATA_API_KEY");
  serve->add_option("--chat-template", serve_flags.chat_template,
                    "Jinja file for /v1/chat/completions (default: tokenizer_config.json's)");

  ExportFlags export_flags;
  auto* export_command = app.add_subcommand(
      "export", "Write a checkpoint as a Hugging Face model directory (docs/models.md)");
  export_command
      ->add_option("--checkpoint", export_flags.checkpoint,
                   "Checkpoint directory (step_*) or Hugging Face model directory")
      ->required();
  export_command->add_option("--out", export_flags.out, "New or empty output directory")
      ->required();
  export_command->add_option("--shard-size", export_flags.shard_size,
                             "Largest safetensors file, e.g. 2GB (default: one file)");
  export_command->add_option("--dtype", export_flags.dtype,
                             "fp32, bf16 or fp16 (default: the source model's, else fp32)");

  std::vector<std::string> inputs;
  std::string out_dir, tokenizer_name = "byte";
  PrepareOptions prepare_options;
  prepare_options.progress_bar = true;
  auto* data = app.add_subcommand("data", "Data preparation");
  data->require_subcommand(1);
  auto* prepare = data->add_subcommand("prepare", "Tokenize text or JSONL files into token shards");
  prepare->add_option("inputs", inputs, "Text or .jsonl(.gz/.zst) files, or directories")
      ->required();
  prepare->add_option("--out", out_dir, "Output directory")->required();
  prepare->add_option("--tokenizer", tokenizer_name, "Tokenizer (data.tokenizer; default byte)");
  prepare->add_option("--field", prepare_options.field, "JSON field holding the text (text)");
  auto* prompt_completion =
      prepare->add_flag("--prompt-completion", prepare_options.prompt_completion,
                        "JSONL records of \"prompt\" and \"completion\": store a loss mask so "
                        "only completion tokens carry loss (data.loss_mask = \"completion\")");
  bool prepare_chat = false;
  std::string prepare_chat_template;
  auto* chat_flag =
      prepare
          ->add_flag("--chat", prepare_chat,
                     "JSONL records of chat \"messages\", rendered by the chat template: store "
                     "a loss mask so only the assistant turns carry loss")
          ->excludes(prompt_completion);
  prepare
      ->add_option("--chat-template", prepare_chat_template,
                   "Jinja chat template file for --chat (default: the --tokenizer directory's "
                   "tokenizer_config.json chat_template)")
      ->needs(chat_flag);
  prepare->add_option("--threads", prepare_options.threads, "Tokenizer threads (0 = every core)")
      ->check(CLI::NonNegativeNumber);
  double shard_mib = 64;
  prepare->add_option("--shard-mib", shard_mib, "Token bytes per shard file, MiB (64)")
      ->check(CLI::PositiveNumber);

  add_simulate_command(app);
  add_plan_command(app);
  add_env_command(app);
  add_tokenize_command(app);

  CLI11_PARSE(app, argc, argv);
  // The command line to re-execute under mpirun, with this binary's absolute path.
  std::vector<std::string> args(argv, argv + argc);
  std::error_code error;
  auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) args[0] = self.string();

  try {
    if (*train) return run_train(config_path, overrides, launch, args);
    if (*config) {
      STRATA_REQUIRE(
          old_nproc.empty(), "strata config --nproc is now --ranks (the ranks to ",
          "validate for; --nproc starts ranks in train, generate and serve): use --ranks ",
          old_nproc);
      return run_config(config_path, overrides, world_size);
    }
    if (*generate_command) return run_generate(generate_flags, args);
    if (*serve) return run_serve(serve_flags, args);
    if (*export_command) return run_export(export_flags);
    if (*prepare) {
      prepare_options.max_shard_bytes =
          std::max<int64_t>(1, static_cast<int64_t>(shard_mib * (1 << 20)));
      std::optional<ChatTemplate> chat_template;  // parsed once, shared by the threads
      if (prepare_chat) {
        chat_template.emplace(data_chat_template(tokenizer_name, prepare_chat_template));
        prepare_options.chat_template = &*chat_template;
      }
      return run_data_prepare(inputs, out_dir, tokenizer_name, prepare_options);
    }
  } catch (const UserError& error) {
    // Before MPI starts, under an external launcher every rank fails alike: rank 0 reports.
    if (launcher_rank() <= 0) std::cerr << "strata: error: " << error.what() << std::endl;
    return 2;
  }
  return 0;
}
