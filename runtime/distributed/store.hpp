// The rendezvous store: a small TCP key-value server on rank 0 that every rank (rank 0 too)
// talks to during bootstrap, e.g. to exchange gloo addresses or an NCCL unique id. Values are
// bytes; `get` and `wait` block until the key exists or the timeout passes, and the error then
// names the key, the store's address and the timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace loom::dist {

using Bytes = std::vector<char>;

class StoreServer {
 public:
  // Listens on host:port (port 0 = any free port; see port()).
  StoreServer(const std::string& host, int port);
  // Serves on a socket that is already bound and listening (the local launcher's, handed down).
  explicit StoreServer(int listening_fd);
  ~StoreServer();
  int port() const { return port_; }

 private:
  void serve();
  void start();
  int listen_fd_ = -1, port_ = 0, wake_[2] = {-1, -1};
  std::thread thread_;
};

class StoreClient {
 public:
  // Connects on the first request, retrying until `timeout` (the server may not be up yet).
  StoreClient(const std::string& host, int port, std::chrono::milliseconds timeout);
  ~StoreClient();

  void set(const std::string& key, const Bytes& value);
  Bytes get(const std::string& key);   // waits for the key
  bool check(const std::string& key);  // exists now?
  void wait(const std::vector<std::string>& keys);
  int64_t add(const std::string& key, int64_t delta);  // atomic; returns the new value
  std::chrono::milliseconds timeout() const { return timeout_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }

 private:
  void connect();
  Bytes request(char op, const std::string& key, const Bytes& value, bool* found);
  std::string host_;
  int port_, fd_ = -1;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
};

}  // namespace loom::dist
