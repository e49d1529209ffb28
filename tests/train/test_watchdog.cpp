// The step watchdog: quiet while steps finish in time; when none does, it writes the flight
// record, prints a one-line diagnosis and ends the process with exit code 3.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "strata/dist/flight_record.h"
#include "strata/train/watchdog.h"
#include "test_support.h"

namespace strata {
namespace {

using namespace std::chrono_literals;

TEST(Watchdog, StaysQuietWhileStepsFinishInTime) {
  Watchdog watchdog(0.5, 0);
  for (int step = 1; step <= 10; ++step) {
    std::this_thread::sleep_for(100ms);  // 1 s in all: twice the timeout
    watchdog.beat(step);
  }
}

TEST(WatchdogDeathTest, NoStepInTimeWritesTheFlightRecordAndExits) {
  testing::TempDir dir;
  const std::string record = dir.file("flight_rank_00007.json");
  EXPECT_EXIT(
      {
        set_flight_record_path(record);
        Watchdog watchdog(0.2, 7);
        watchdog.beat(5);
        std::this_thread::sleep_for(30s);
      },
      ::testing::ExitedWithCode(Watchdog::kExitCode),
      "strata: rank 7: hang: no step finished within fault.step_timeout_s = 0.2 s after step 5; "
      "no communication pending \\(hung in computation\\); flight record .*flight_rank_00007");
  std::ifstream file(record);
  ASSERT_TRUE(file.good());
  const nlohmann::json written = nlohmann::json::parse(file);
  EXPECT_NE(written["reason"].get<std::string>().find("after step 5"), std::string::npos);
  EXPECT_TRUE(written["operations"].empty()) << "no communication in this process";
}

}  // namespace
}  // namespace strata
