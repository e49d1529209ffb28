// The flight record's ring, filled by CommState as operations are posted and finish.
#include "strata/dist/flight_record.h"

#include <array>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "strata/core/error.h"
#include "strata/dist/mpi_internal.h"

namespace strata {
namespace {

struct FlightEntry {
  int64_t id = -1;  // -1: an empty slot
  std::string op, group, state;
  int peer_world_rank = -1;
  int tag = 0;
  int64_t seq = 0, bytes = 0;
  dist_internal::Clock::time_point posted, finished;
};

struct FlightRecord {
  std::mutex mutex;  // the watchdog thread reads while the training thread records
  std::array<FlightEntry, kFlightRecordSize> ring;
  int64_t next_id = 0;
  std::string path;
  const dist_internal::Clock::time_point start = dist_internal::Clock::now();
};
FlightRecord& record() {
  static FlightRecord instance;
  return instance;
}

double seconds_between(dist_internal::Clock::time_point from, dist_internal::Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

std::string describe(const FlightEntry& entry, dist_internal::Clock::time_point now) {
  std::string what = entry.op + (entry.seq > 0 ? str(" #", entry.seq) : "");
  if (entry.peer_world_rank >= 0) what += str(" with world rank ", entry.peer_world_rank);
  return str(what, " on group '", entry.group, "' (", entry.bytes, " bytes), pending for ",
             dist_internal::format_seconds(seconds_between(entry.posted, now)));
}

}  // namespace

namespace dist_internal {

int64_t flight_posted(const std::string& op, const std::string& group, int peer_world_rank, int tag,
                      int64_t seq, int64_t bytes) {
  FlightRecord& r = record();
  std::lock_guard<std::mutex> lock(r.mutex);
  const int64_t id = r.next_id++;
  r.ring[id % kFlightRecordSize] = {id,  op,  group, "pending",    peer_world_rank,
                                    tag, seq, bytes, Clock::now(), {}};
  return id;
}

void flight_finished(int64_t id, const char* state) {
  if (id < 0) return;
  FlightRecord& r = record();
  std::lock_guard<std::mutex> lock(r.mutex);
  FlightEntry& entry = r.ring[id % kFlightRecordSize];
  if (entry.id != id) return;  // long since overwritten
  entry.state = state;
  entry.finished = Clock::now();
}

}  // namespace dist_internal

void set_flight_record_path(const std::string& path) {
  FlightRecord& r = record();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.path = path;
}

std::string oldest_pending_operation() {
  FlightRecord& r = record();
  std::lock_guard<std::mutex> lock(r.mutex);
  const FlightEntry* oldest = nullptr;
  for (const FlightEntry& entry : r.ring) {
    if (entry.id >= 0 && entry.state == "pending" && (!oldest || entry.id < oldest->id)) {
      oldest = &entry;
    }
  }
  return oldest ? describe(*oldest, dist_internal::Clock::now()) : "";
}

std::string write_flight_record(const std::string& reason) {
  FlightRecord& r = record();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.path.empty()) return "";
  const auto now = dist_internal::Clock::now();
  nlohmann::json operations = nlohmann::json::array();
  const int64_t first = std::max<int64_t>(0, r.next_id - kFlightRecordSize);
  for (int64_t id = first; id < r.next_id; ++id) {  // oldest first
    const FlightEntry& entry = r.ring[id % kFlightRecordSize];
    nlohmann::json op = {{"id", entry.id},
                         {"op", entry.op},
                         {"group", entry.group},
                         {"seq", entry.seq},
                         {"bytes", entry.bytes},
                         {"state", entry.state},
                         {"posted_s", seconds_between(r.start, entry.posted)}};
    if (entry.peer_world_rank >= 0) {
      op["peer_world_rank"] = entry.peer_world_rank;
      op["tag"] = entry.tag;
    }
    if (entry.state != "pending") op["finished_s"] = seconds_between(r.start, entry.finished);
    operations.push_back(std::move(op));
  }
  const nlohmann::json out = {
      {"reason", reason}, {"written_s", seconds_between(r.start, now)}, {"operations", operations}};
  std::ofstream file(r.path, std::ios::trunc);
  file << out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  file.close();
  if (!file) {
    std::fprintf(stderr, "strata: could not write the flight record %s\n", r.path.c_str());
    return "";
  }
  return r.path;
}

}  // namespace strata
