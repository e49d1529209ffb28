// The flight record: the last kFlightRecordSize communication operations this process posted
// (sequence number, kind, group, peer, bytes, pending/done, timestamps), kept in a ring so
// that a rank that hangs or times out can say what it was doing. Written as JSON to
// <log.dir>/flight_rank_NNNNN.json by the watchdog (train/watchdog.h) or when a collective
// times out (docs/launch.md). Safe to read from any thread.
#pragma once
#include <string>

namespace strata {

constexpr int kFlightRecordSize = 64;

// Where write_flight_record writes; "" (the default) = nowhere.
void set_flight_record_path(const std::string& path);

// Writes the record, with `reason` at its head, to the path set; returns that path, or ""
// when none is set or the write failed (reported on stderr). Any thread.
std::string write_flight_record(const std::string& reason);

// "all_reduce #12 on group 'dp' (4096 bytes), pending for 3.2 s": the oldest operation of the
// record that has not finished, or "" when none is pending.
std::string oldest_pending_operation();

}  // namespace strata
