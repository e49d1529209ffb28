// The HTTP side's connection handling: a front stopped right after it starts (a session that
// fails while loading) returns instead of waiting forever; a handler finds the socket of its
// request and sees the client hang up.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include "strata/serve/client_connection.h"
#include "strata/serve/http_front.h"
#include "test_support.h"

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
      HttpFront front(config, ServedModel{"m", 32, 256, &tokenizer});
      EXPECT_GT(front.start(), 0);
      front.stop();
    }
  })) << "HttpFront::stop() right after start() did not return";
}

TEST(ClientConnection, AHandlerFindsItsSocketAndSeesTheClientHangUp) {
  httplib::Server server;
  std::atomic<bool> found{false}, open_at_first{false}, saw_hang_up{false}, handler_done{false};
  std::atomic<bool> client_may_close{false};
  server.Post("/wait", [&](const httplib::Request& request, httplib::Response& response) {
    ClientConnection connection(request.local_addr, request.local_port, request.remote_addr,
                                request.remote_port);
    found = connection.found();
    open_at_first = !connection.closed();
    client_may_close = true;
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (connection.found() && std::chrono::steady_clock::now() < deadline) {
      if (connection.closed()) {
        saw_hang_up = true;
        break;
      }
      std::this_thread::sleep_for(1ms);
    }
    response.set_content("late", "text/plain");
    handler_done = true;
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread listener([&] { server.listen_after_bind(); });
  while (!server.is_running()) std::this_thread::sleep_for(1ms);

  // A second client, connected and idle, must not be taken for the first one's socket.
  const int bystander = testing::connect_to_loopback(port);
  ASSERT_GE(bystander, 0);
  const int client = testing::connect_to_loopback(port);
  ASSERT_GE(client, 0);
  const std::string request =
      "POST /wait HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}";
  ASSERT_EQ(::write(client, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!client_may_close && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(client_may_close) << "the handler never ran";
  ::close(client);  // the client hangs up before the answer
  while (!handler_done && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ::close(bystander);
  server.stop();
  listener.join();

  EXPECT_TRUE(found) << "the request's socket was not found by its addresses";
  EXPECT_TRUE(open_at_first) << "the connection read as closed while the client was there";
  EXPECT_TRUE(saw_hang_up) << "the client's close was not seen";
}

TEST(ClientConnection, UnknownAddressesAreNeverClosed) {
  ClientConnection connection("127.0.0.1", 1, "127.0.0.1", 1);
  EXPECT_FALSE(connection.found());
  EXPECT_FALSE(connection.closed());
}

}  // namespace
}  // namespace strata
