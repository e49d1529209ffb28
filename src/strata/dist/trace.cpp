// Trace events and their merge on rank 0 (each rank's events travel as JSON text).
#include "strata/dist/trace.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "strata/core/error.h"
#include "strata/dist/comm.h"

namespace strata {

Trace::Trace(bool enabled, int rank)
    : enabled_(enabled), rank_(rank), origin_(std::chrono::steady_clock::now()) {}

double Trace::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_)
      .count();
}

Trace::Scope::Scope(Trace& trace, const char* name, int64_t step, int64_t microbatch)
    : trace_(trace),
      name_(name),
      step_(step),
      microbatch_(microbatch),
      start_us_(trace.enabled_ ? trace.now_us() : 0) {}

Trace::Scope::~Scope() {
  if (!trace_.enabled_) return;
  trace_.events_.push_back({name_, step_, microbatch_, start_us_, trace_.now_us() - start_us_});
}

void Trace::write(const std::string& dir, Comm& world) const {
  if (!enabled_) return;
  nlohmann::json events = nlohmann::json::array();
  for (const auto& event : events_) {
    nlohmann::json args = nlohmann::json::object();
    if (event.step >= 0) args["step"] = event.step;
    if (event.microbatch >= 0) args["microbatch"] = event.microbatch;
    events.push_back({{"name", event.name},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", rank_},
                      {"ts", event.start_us},
                      {"dur", event.duration_us},
                      {"args", args}});
  }
  // Gather every rank's JSON text on all ranks: lengths first, then padded bytes.
  const std::string text = events.dump();
  at::Tensor length = at::tensor({static_cast<int64_t>(text.size())}, at::kLong);
  at::Tensor lengths = at::empty({world.size()}, at::kLong);
  world.all_gather(lengths, length);
  const int64_t longest = lengths.max().item<int64_t>();
  at::Tensor mine = at::zeros({longest}, at::kByte);
  std::memcpy(mine.data_ptr(), text.data(), text.size());
  at::Tensor all = at::empty({world.size() * longest}, at::kByte);
  world.all_gather(all, mine);
  if (world.rank() != 0) return;

  nlohmann::json merged = nlohmann::json::array();
  for (int rank = 0; rank < world.size(); ++rank) {
    merged.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", rank},
                      {"args", {{"name", "rank " + std::to_string(rank)}}}});
    const char* begin = reinterpret_cast<const char*>(all.data_ptr()) + rank * longest;
    for (auto& event : nlohmann::json::parse(begin, begin + lengths[rank].item<int64_t>())) {
      merged.push_back(std::move(event));
    }
  }
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/trace.json";
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary);
    out << nlohmann::json{{"traceEvents", merged}, {"displayTimeUnit", "ms"}}.dump();
    STRATA_REQUIRE(out.good(), "cannot write ", temporary, "; check log.dir");
  }
  std::filesystem::rename(temporary, path);
}

}  // namespace strata
