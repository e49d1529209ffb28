// JSON metrics lines and the progress display.
#include "strata/train/metrics.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <iostream>

#include "strata/core/atomic_file.h"
#include "strata/core/error.h"

namespace strata {

nlohmann::json to_json(const StepMetrics& metrics) {
  nlohmann::json line = {{"step", metrics.step},
                         {"loss", metrics.loss},
                         {"lr", metrics.lr},
                         {"grad_norm", metrics.grad_norm},
                         {"step_time_s", metrics.step_time_s},
                         {"tokens_per_s", metrics.tokens_per_s},
                         {"mfu", metrics.mfu},
                         {"bubble_fraction", metrics.bubble_fraction},
                         {"tokens", metrics.tokens},
                         {"loss_tokens", metrics.loss_tokens},
                         {"mem",
                          {{"params", metrics.mem.params},
                           {"grads", metrics.mem.grads},
                           {"optimizer", metrics.mem.optimizer},
                           {"activations_peak", metrics.mem.activations_peak},
                           {"rss_peak", metrics.mem.rss_peak}}},
                         {"dp_buckets", metrics.dp_buckets},
                         {"dp_buckets_overlapped", metrics.dp_buckets_overlapped},
                         {"comm_bytes", metrics.comm},
                         {"comm_bytes_uncompressed", metrics.comm_uncompressed},
                         {"comm_wait_s", metrics.comm_wait},
                         {"comm_share", metrics.comm_share}};
  if (!metrics.moe.is_null()) line["moe"] = metrics.moe;
  if (metrics.loss_scaling) {
    line["loss_scale"] = metrics.loss_scale;
    line["skipped"] = metrics.skipped;
    line["skipped_steps"] = metrics.skipped_steps;
  }
  if (metrics.checkpoint_stall_s >= 0) line["checkpoint_stall_s"] = metrics.checkpoint_stall_s;
  return line;
}

MetricsLog::MetricsLog(const std::string& dir, bool active, int64_t first_step) {
  if (!active || dir.empty()) return;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  STRATA_REQUIRE(!error, "cannot create log.dir '", dir, "': ", error.message());
  const std::string path = dir + "/metrics.jsonl";
  drop_records_after(path, first_step);
  file_.open(path, std::ios::app);
  STRATA_REQUIRE(file_.good(), "cannot open ", path, " for writing; check log.dir");
}

void MetricsLog::drop_records_after(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in.is_open()) return;
  std::string kept, line;
  bool dropped = false;
  while (std::getline(in, line)) {
    // A line cut short by a crash does not parse: it goes too.
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
        record["step"].get<int64_t>() <= step) {
      kept += line + "\n";
    } else {
      dropped = true;
    }
  }
  if (dropped) write_file_atomically(path, kept.data(), kept.size());
}

void MetricsLog::write(const nlohmann::json& line) {
  if (!file_.is_open()) return;
  file_ << line.dump() << '\n';
  file_.flush();
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto total = static_cast<int64_t>(std::llround(seconds));
  char buffer[32];
  if (total >= 3600) {
    std::snprintf(buffer, sizeof buffer, "%lldh%02lldm", static_cast<long long>(total / 3600),
                  static_cast<long long>(total % 3600 / 60));
  } else if (total >= 60) {
    std::snprintf(buffer, sizeof buffer, "%lldm%02llds", static_cast<long long>(total / 60),
                  static_cast<long long>(total % 60));
  } else {
    std::snprintf(buffer, sizeof buffer, "%llds", static_cast<long long>(total));
  }
  return buffer;
}

std::string format_rate(double per_second) {
  char buffer[32];
  if (per_second >= 1e6) {
    std::snprintf(buffer, sizeof buffer, "%.2fM", per_second / 1e6);
  } else if (per_second >= 1e4) {
    std::snprintf(buffer, sizeof buffer, "%.1fk", per_second / 1e3);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.0f", per_second);
  }
  return buffer;
}

namespace {
// A terminal on stdout? Ranks started by `strata train --nproc` learn it from the launching
// process, because mpirun hands them a pseudo-terminal whatever the user's stdout is.
bool stdout_is_terminal() {
  const char* launcher_view = std::getenv("STRATA_STDOUT_IS_TTY");
  if (launcher_view != nullptr) return std::string(launcher_view) == "1";
  return isatty(STDOUT_FILENO);
}
}  // namespace

Progress::Progress(ProgressDisplay mode, int64_t total_steps, int64_t line_every, bool active)
    : active_(active && mode != ProgressDisplay::none),
      bar_(mode == ProgressDisplay::bar ||
           (mode == ProgressDisplay::automatic && stdout_is_terminal())),
      total_steps_(total_steps),
      line_every_(std::max<int64_t>(1, line_every)) {}

void Progress::update(const StepMetrics& m) {
  if (!active_) return;
  elapsed_s_ += m.step_time_s;
  ++steps_seen_;
  const double eta = elapsed_s_ / steps_seen_ * static_cast<double>(total_steps_ - m.step);
  char line[256];
  if (bar_) {
    constexpr int kWidth = 24;
    int filled = static_cast<int>(kWidth * m.step / std::max<int64_t>(1, total_steps_));
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::snprintf(
        line, sizeof line, "\rstep %lld/%lld [%s] loss %.4f | %s tok/s | mfu %.1f%% | ETA %s ",
        static_cast<long long>(m.step), static_cast<long long>(total_steps_), bar.c_str(), m.loss,
        format_rate(m.tokens_per_s).c_str(), 100 * m.mfu, format_duration(eta).c_str());
    std::cout << line << std::flush;
    bar_open_ = true;
    return;
  }
  if (m.step % line_every_ != 0 && m.step != total_steps_ && m.step != 1) return;
  std::snprintf(line, sizeof line,
                "step %lld/%lld  loss %.4f  lr %.2e  grad_norm %.3f  %s tok/s  mfu %.1f%%  ETA %s",
                static_cast<long long>(m.step), static_cast<long long>(total_steps_), m.loss, m.lr,
                m.grad_norm, format_rate(m.tokens_per_s).c_str(), 100 * m.mfu,
                format_duration(eta).c_str());
  std::cout << line << std::endl;
}

void Progress::message(const std::string& text) {
  if (!active_) return;
  if (bar_open_) std::cout << '\n';
  bar_open_ = false;
  std::cout << text << std::endl;
}

void Progress::eval(int64_t step, double eval_loss) {
  char line[96];
  std::snprintf(line, sizeof line, "eval at step %lld: loss %.4f", static_cast<long long>(step),
                eval_loss);
  message(line);
}

void Progress::finish() {
  if (active_ && bar_open_) std::cout << std::endl;
  bar_open_ = false;
}

}  // namespace strata
