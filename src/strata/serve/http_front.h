// The HTTP side of `strata serve` on rank 0 (cpp-httplib): GET /health, GET /v1/models,
// POST /v1/completions and /v1/chat/completions (JSON or Server-Sent Events) and GET /metrics. It
// listens before the model has loaded (answering 503 until attach()), on threads of its own; the
// engine runs in the MPI thread. With an API key, every /v1/ request must carry `Authorization:
// Bearer KEY` (401 otherwise); /health and /metrics stay open. Bodies over serve.max_request_mb get
// 413.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "strata/core/config.h"
#include "strata/data/tokenizer.h"
#include "strata/serve/completion_request.h"
#include "strata/serve/engine.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace strata {

// Whether binding `host` answers only this machine (127.0.0.0/8, ::1, localhost).
bool is_loopback(const std::string& host);

class HttpFront {
 public:
  // model.name: the id of /v1/models and the only `model` requests may name. api_key: empty =
  // no authentication.
  HttpFront(const ServeConfig& config, ServedModel model, std::string api_key = "");
  ~HttpFront();

  // Binds config.host:config.port (port 0: any free one) and starts answering. Returns the
  // port bound; throws UserError naming serve.host and serve.port if it cannot bind.
  int start();
  // From now on requests go to `engine` and /health answers 200.
  void attach(Engine* engine);
  // Stops listening and waits for the listening thread. Requests in flight must have been
  // released first (Engine::stop finishes their sequences).
  void stop();

 private:
  // POST /v1/completions, or with `chat` POST /v1/chat/completions.
  void completions(const httplib::Request& request, httplib::Response& response, bool chat);
  void metrics(httplib::Response& response);
  void count(int status);
  bool authorized(const httplib::Request& request) const;

  ServeConfig config_;
  ServedModel model_;
  std::string api_key_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  std::atomic<bool> listener_done_{false};  // listen_after_bind() returned
  int listen_socket_ = -1;
  std::atomic<Engine*> engine_{nullptr};
  std::atomic<int64_t> next_id_{0};
  std::mutex counts_mutex_;
  std::map<int, int64_t> requests_by_status_;
};

}  // namespace strata
