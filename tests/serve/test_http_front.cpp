// The HTTP side's connection handling: a front stopped right after it starts (a session that
// fails while loading) returns instead of waiting forever.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include "strata/serve/http_front.h"

namespace strata {
namespace {

using namespace std::chrono_literals;

// Runs `body` on a thread of its own and waits at most `limit` for it: a test of something
// that used to hang fails instead of hanging (the stuck thread is left behind, detached).
bool finishes_within(std::chrono::seconds limit, std::function<void()> body) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([body = std::move(body), done] {
    body();
    done->set_value();
  }).detach();
  return finished.wait_for(limit) == std::future_status::ready;
}

TEST(HttpFront, StopRightAfterStartReturns) {
  // Before the fix, a stop() that came before the listening thread had marked the server
  // running did nothing, and the join waited in accept() forever.
  EXPECT_TRUE(finishes_within(60s, [] {
    ServeConfig config;
    config.port = 0;
    config.max_queue = 2;
    config.max_batch_tokens = 2;
    ByteTokenizer tokenizer;
    for (int round = 0; round < 20; ++round) {
      HttpFront front(config, "m", 32, tokenizer);
      EXPECT_GT(front.start(), 0);
      front.stop();
    }
  })) << "HttpFront::stop() right after start() did not return";
}

}  // namespace
}  // namespace strata
