// The HTTP side's connection handling: a front stopped right after it starts (a session that
// fails while loading) returns instead of waiting forever; the API key and the body limit are
// enforced before a route runs; a handler finds the socket of its request and sees the client
// hang up.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "expect_error.h"
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
      HttpFront front(config, ServedModel{"m", 32, 256, &tokenizer, {}, nullptr});
      EXPECT_GT(front.start(), 0);
      front.stop();
    }
  })) << "HttpFront::stop() right after start() did not return";
}

// A front on a free port with no engine attached (the model "loading").
struct LoadingFront {
  explicit LoadingFront(const std::string& api_key, double max_request_mb = 16.0) {
    config.port = 0;
    config.max_queue = 2;
    config.max_batch_tokens = 2;
    config.max_request_mb = max_request_mb;
    front = std::make_unique<HttpFront>(config, ServedModel{"m", 32, 256, &tokenizer, {}, nullptr},
                                        api_key);
    port = front->start();
  }
  ~LoadingFront() { front->stop(); }

  ServeConfig config;
  ByteTokenizer tokenizer;
  std::unique_ptr<HttpFront> front;
  int port = 0;
};

TEST(HttpFront, AnApiKeyGuardsEveryV1RouteButNotHealthOrMetrics) {
  LoadingFront server("k3y-0f-16-bytes!");
  httplib::Client client("127.0.0.1", server.port);
  auto status = [&](const char* path, const char* key) {
    httplib::Headers headers;
    if (key) headers.emplace("Authorization", key);
    auto result = client.Get(path, headers);
    return result ? result->status : -1;
  };
  EXPECT_EQ(status("/v1/models", nullptr), 401);
  EXPECT_EQ(status("/v1/models", "Bearer k3y-0f-16-bytes"), 401);    // a prefix of the key
  EXPECT_EQ(status("/v1/models", "Bearer k3y-0f-16-bytes!!"), 401);  // longer
  EXPECT_EQ(status("/v1/models", "Bearer K3Y-0F-16-BYTES!"), 401);
  EXPECT_EQ(status("/v1/models", "k3y-0f-16-bytes!"), 401);  // no scheme
  EXPECT_EQ(status("/v1/models", "Bearer k3y-0f-16-bytes!"), 200);
  EXPECT_EQ(status("/health", nullptr), 503);  // open, and the model is loading
  EXPECT_EQ(status("/metrics", nullptr), 503);

  auto refused = client.Post("/v1/completions", R"({"prompt": "x"})", "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  const auto error = nlohmann::json::parse(refused->body)["error"];
  EXPECT_EQ(error["code"], "invalid_api_key");
  EXPECT_CONTAINS(error["message"].get<std::string>(), "Authorization: Bearer");
  // With the key, the request reaches the route (503: no engine yet).
  auto admitted = client.Post("/v1/completions", {{"Authorization", "Bearer k3y-0f-16-bytes!"}},
                              R"({"prompt": "x"})", "application/json");
  ASSERT_TRUE(admitted);
  EXPECT_EQ(admitted->status, 503);
}

TEST(HttpFront, WithoutAKeyEveryRouteIsOpen) {
  LoadingFront server("");
  httplib::Client client("127.0.0.1", server.port);
  auto result = client.Get("/v1/models");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
}

TEST(HttpFront, ABodyOverTheLimitGets413NamingTheKey) {
  LoadingFront server("key", 1.0 / 1024);  // 1 KiB
  httplib::Client client("127.0.0.1", server.port);
  const httplib::Headers key = {{"Authorization", "Bearer key"}};
  const std::string big = R"({"prompt": ")" + std::string(2000, 'a') + R"("})";
  auto result = client.Post("/v1/completions", key, big, "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 413);
  EXPECT_CONTAINS(nlohmann::json::parse(result->body)["error"]["message"].get<std::string>(),
                  "serve.max_request_mb");
  // Under the limit it reaches the route; without the key, even a big body is refused first.
  auto small = client.Post("/v1/completions", key, R"({"prompt": "x"})", "application/json");
  ASSERT_TRUE(small);
  EXPECT_EQ(small->status, 503);
  auto anonymous = client.Post("/v1/completions", big, "application/json");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
}

TEST(HttpFront, LoopbackHosts) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "localhost", "::1"}) {
    EXPECT_TRUE(is_loopback(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "::", "10.0.0.1", "example.com", "128.0.0.1"}) {
    EXPECT_FALSE(is_loopback(host)) << host;
  }
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
