#include "distributed/store.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "core/errors.hpp"

namespace loom::dist {

// Wire format. Request: op (1 byte), key length (u32), key, value length (u64), value.
// Reply: found (1 byte), value length (u64), value. Ops: S set, G get, A add (value = i64 delta).
namespace {

constexpr char kSet = 'S', kGet = 'G', kAdd = 'A';

std::string errno_text() { return std::strerror(errno); }

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w, n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r, n -= static_cast<size_t>(r);
  }
  return true;
}

sockaddr_in resolve(const std::string& host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res)
    throw RuntimeError("store: cannot resolve '" + host + "': " + gai_strerror(rc));
  sockaddr_in a = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  freeaddrinfo(res);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

// One client's pending bytes on the server side.
struct Conn {
  std::string in;
};

// Parses as many complete requests as `c.in` holds, answering each on fd.
bool handle(int fd, Conn& c, std::map<std::string, Bytes>& kv) {
  for (;;) {
    if (c.in.size() < 5) return true;
    uint32_t klen;
    std::memcpy(&klen, c.in.data() + 1, 4);
    if (c.in.size() < 5 + klen + 8) return true;
    uint64_t vlen;
    std::memcpy(&vlen, c.in.data() + 5 + klen, 8);
    size_t total = 5 + klen + 8 + vlen;
    if (c.in.size() < total) return true;
    char op = c.in[0];
    std::string key = c.in.substr(5, klen);
    Bytes value(c.in.begin() + 5 + klen + 8, c.in.begin() + total);
    c.in.erase(0, total);
    char found = 1;
    Bytes reply;
    if (op == kSet) {
      kv[key] = std::move(value);
    } else if (op == kGet) {
      auto it = kv.find(key);
      found = it != kv.end();
      if (found) reply = it->second;
    } else if (op == kAdd) {
      int64_t delta = 0, now = 0;
      std::memcpy(&delta, value.data(), std::min<size_t>(8, value.size()));
      auto it = kv.find(key);
      if (it != kv.end() && it->second.size() == 8) std::memcpy(&now, it->second.data(), 8);
      now += delta;
      kv[key] = Bytes(reinterpret_cast<char*>(&now), reinterpret_cast<char*>(&now) + 8);
      reply = kv[key];
    } else {
      return false;
    }
    uint64_t rlen = reply.size();
    if (!write_all(fd, &found, 1) || !write_all(fd, &rlen, 8) || !write_all(fd, reply.data(), rlen))
      return false;
  }
}

}  // namespace

StoreServer::StoreServer(const std::string& host, int port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listen_fd_ < 0) throw RuntimeError("store: socket: " + errno_text());
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = resolve(host, port);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) {
    std::string e = errno_text();
    ::close(listen_fd_);
    throw RuntimeError("store: cannot listen on " + host + ":" + std::to_string(port) + ": " + e +
                       " (is another job using MASTER_PORT?)");
  }
  ::listen(listen_fd_, 1024);
  start();
}

StoreServer::StoreServer(int listening_fd) : listen_fd_(listening_fd) { start(); }

void StoreServer::start() {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  if (::pipe(wake_) != 0) throw RuntimeError("store: pipe: " + errno_text());
  thread_ = std::thread([this] { serve(); });
}

StoreServer::~StoreServer() {
  char x = 0;
  if (::write(wake_[1], &x, 1) < 0) {
  }
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void StoreServer::serve() {
  std::map<std::string, Bytes> kv;
  std::map<int, Conn> conns;
  for (;;) {
    std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (auto& [fd, c] : conns) fds.push_back({fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents) break;
    if (fds[1].revents & POLLIN) {
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conns[fd] = Conn{};
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      int fd = fds[i].fd;
      char buf[65536];
      ssize_t r = ::recv(fd, buf, sizeof buf, 0);
      if (r <= 0 || (conns[fd].in.append(buf, r), !handle(fd, conns[fd], kv))) {
        ::close(fd);
        conns.erase(fd);
      }
    }
  }
  for (auto& [fd, c] : conns) ::close(fd);
}

StoreClient::StoreClient(const std::string& host, int port, std::chrono::milliseconds timeout)
    : host_(host), port_(port), timeout_(timeout) {}

// On first use: a backend that bootstraps without the store (mpi under mpirun) never needs
// MASTER_ADDR to be right.
void StoreClient::connect() {
  sockaddr_in a = resolve(host_, port_);
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
    std::string e = errno_text();
    ::close(fd_);
    fd_ = -1;
    if (std::chrono::steady_clock::now() > deadline)
      throw RuntimeError("store: cannot connect to " + address() + " within " +
                         std::to_string(timeout_.count() / 1000) + " s: " + e +
                         " (is rank 0 running, and MASTER_ADDR/MASTER_PORT right?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

StoreClient::~StoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

Bytes StoreClient::request(char op, const std::string& key, const Bytes& value, bool* found) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0) connect();
  uint32_t klen = static_cast<uint32_t>(key.size());
  uint64_t vlen = value.size();
  char f = 0;
  uint64_t rlen = 0;
  Bytes reply;
  bool ok = write_all(fd_, &op, 1) && write_all(fd_, &klen, 4) &&
            write_all(fd_, key.data(), klen) && write_all(fd_, &vlen, 8) &&
            write_all(fd_, value.data(), vlen) && read_all(fd_, &f, 1) && read_all(fd_, &rlen, 8);
  if (ok) {
    reply.resize(rlen);
    ok = read_all(fd_, reply.data(), rlen);
  }
  if (!ok)
    throw RuntimeError("store: lost the connection to " + address() +
                       " (rank 0, which hosts the store, has probably exited)");
  if (found) *found = f != 0;
  return reply;
}

void StoreClient::set(const std::string& key, const Bytes& value) {
  request(kSet, key, value, nullptr);
}

bool StoreClient::check(const std::string& key) {
  bool found = false;
  request(kGet, key, {}, &found);
  return found;
}

Bytes StoreClient::get(const std::string& key) {
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (auto pause = std::chrono::microseconds(200);;
       pause = std::min(pause * 2, std::chrono::microseconds(20000))) {
    bool found = false;
    Bytes v = request(kGet, key, {}, &found);
    if (found) return v;
    if (std::chrono::steady_clock::now() > deadline)
      throw RuntimeError("store " + address() + ": timed out after " +
                         std::to_string(timeout_.count() / 1000) + " s waiting for key '" + key +
                         "'");
    std::this_thread::sleep_for(pause);
  }
}

void StoreClient::wait(const std::vector<std::string>& keys) {
  for (const auto& k : keys) get(k);
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  Bytes d(reinterpret_cast<char*>(&delta), reinterpret_cast<char*>(&delta) + 8);
  Bytes r = request(kAdd, key, d, nullptr);
  int64_t v = 0;
  std::memcpy(&v, r.data(), 8);
  return v;
}

}  // namespace loom::dist
