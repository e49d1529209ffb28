// The step profile (op_profile.h) on ATen's legacy profiler: it records a push and a pop per
// operator on each thread; a stack pairs them into complete events, and an event's self time
// is its duration less its children's.
#include "strata/train/op_profile.h"

#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "strata/core/atomic_file.h"

namespace strata {
namespace {

namespace profiler = torch::autograd::profiler;

struct Event {
  std::string name, shapes;
  double start_us, duration_us, self_us;
  uint64_t thread;
  int depth;  // 0 for an operator no other recorded one encloses
};

std::string shapes_of(const profiler::LegacyEvent& event) {
  std::string text;
  for (const auto& shape : event.shapes()) {
    if (!text.empty()) text += " ";
    text += "[";
    for (size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
    text += "]";
  }
  return text;
}

// Complete events from each thread's pushes and pops, in the order they ended.
std::vector<Event> pair_up(const profiler::thread_event_lists& lists) {
  std::vector<Event> events;
  for (const auto& list : lists) {
    struct Open {
      const profiler::LegacyEvent* push;
      double children_us;
    };
    std::vector<Open> open;
    for (const auto& event : list) {
      if (event.kind() == profiler::EventKind::PushRange) {
        open.push_back({&event, 0.0});
      } else if (event.kind() == profiler::EventKind::PopRange && !open.empty()) {
        const Open begun = open.back();
        open.pop_back();
        const double duration = begun.push->cpuElapsedUs(event);
        if (!open.empty()) open.back().children_us += duration;
        events.push_back({begun.push->name(), shapes_of(*begun.push), begun.push->cpuUs(), duration,
                          duration - begun.children_us, begun.push->threadId(),
                          static_cast<int>(open.size())});
      }
    }
  }
  return events;
}

std::string chrome_trace(const std::vector<Event>& events, int rank) {
  double origin = events.empty() ? 0.0 : events.front().start_us;
  for (const Event& e : events) origin = std::min(origin, e.start_us);
  nlohmann::json trace = nlohmann::json::array();
  for (const Event& e : events) {
    nlohmann::json event = {{"name", e.name},
                            {"ph", "X"},
                            {"pid", rank},
                            {"tid", e.thread},
                            {"ts", e.start_us - origin},
                            {"dur", e.duration_us}};
    if (!e.shapes.empty()) event["args"] = {{"shapes", e.shapes}};
    trace.push_back(std::move(event));
  }
  return nlohmann::json{{"traceEvents", trace}, {"displayTimeUnit", "ms"}}.dump();
}

struct Total {
  double self_us = 0, total_us = 0;
  int64_t calls = 0;
};

std::string table(const std::vector<Event>& events, int64_t step, int rank, double step_seconds) {
  std::map<std::pair<std::string, std::string>, Total> by_shape;
  std::map<std::string, Total> by_name;
  double recorded_us = 0;  // the operators no recorded one encloses, on the step's thread
  for (const Event& e : events) {
    for (Total* t : {&by_shape[{e.name, e.shapes}], &by_name[e.name]}) {
      t->self_us += e.self_us;
      t->total_us += e.duration_us;
      t->calls += 1;
    }
    if (e.depth == 0) recorded_us += e.duration_us;
  }
  const double step_us = step_seconds * 1e6;
  char line[512];
  std::string text = "step " + std::to_string(step) + ", rank " + std::to_string(rank) + ": ";
  std::snprintf(line, sizeof line,
                "%.1f ms, of which %.1f ms in recorded operators and %.1f ms outside any "
                "(strata's code between operators, waits)\n",
                step_us / 1e3, recorded_us / 1e3, std::max(0.0, step_us - recorded_us) / 1e3);
  text += line;
  auto sorted = [](const auto& totals) {
    std::vector<std::pair<typename std::decay_t<decltype(totals)>::key_type, Total>> rows(
        totals.begin(), totals.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.self_us > b.second.self_us; });
    return rows;
  };
  auto add_row = [&](const Total& t, const std::string& what) {
    std::snprintf(line, sizeof line, "%10.2f %9.1f%% %10.2f %7lld  ", t.self_us / 1e3,
                  100.0 * t.self_us / step_us, t.total_us / 1e3, static_cast<long long>(t.calls));
    text += line + what + "\n";
  };
  text += "\nby operator\n   self ms  % of step   total ms   calls  operator\n";
  for (const auto& [name, t] : sorted(by_name)) add_row(t, name);
  text +=
      "\nby operator and input shapes\n   self ms  % of step   total ms   calls  operator  "
      "shapes\n";
  for (const auto& [key, t] : sorted(by_shape)) add_row(t, key.first + "  " + key.second);
  return text;
}

}  // namespace

StepProfile::StepProfile(std::string dir, int64_t step, int rank)
    : dir_(std::move(dir)), step_(step), rank_(rank) {
  std::filesystem::create_directories(dir_);
  profiler::enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(
      torch::profiler::impl::ProfilerState::CPU, /*report_input_shapes=*/true));
}

StepProfile::~StepProfile() {
  if (recording_) profiler::disableProfilerLegacy();
}

std::string StepProfile::finish(double step_seconds) {
  recording_ = false;
  const std::vector<Event> events = pair_up(profiler::disableProfilerLegacy());
  const std::string base =
      dir_ + "/profile_step_" + std::to_string(step_) + "_rank_" + std::to_string(rank_);
  const std::string trace = chrome_trace(events, rank_);
  const std::string text = table(events, step_, rank_, step_seconds);
  write_file_atomically(base + ".json", trace.data(), trace.size());
  write_file_atomically(base + ".txt", text.data(), text.size());
  return base + ".txt";
}

}  // namespace strata
