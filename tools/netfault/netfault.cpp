// loom-netfault: a link that delays and drops Ethernet frames, for kernels without the netem
// qdisc (this one has neither netem nor iptables). It forwards every frame between two
// interfaces, each way, through a queue: a frame leaves `delay_ms ± jitter_ms` after it arrived
// (uniform jitter, never before the frame ahead of it: one link keeps its order, as netem does
// with a rate set), and `loss` percent of frames are dropped. scripts/local-cluster.sh splices it
// into one node's cable.
//   loom-netfault --a IF --b IF [--delay-ms D] [--jitter-ms J] [--loss PCT] [--seed S]
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string a, b;
  double delay_ms = 0, jitter_ms = 0, loss_pct = 0;
  unsigned seed = 1;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "loom-netfault: %s\nusage: loom-netfault --a IF --b IF [--delay-ms D] [--jitter-ms "
               "J] [--loss PCT] [--seed S]\n",
               why.c_str());
  std::exit(2);
}

double number(const char* flag, const char* text, double lo, double hi) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end || v < lo || v > hi)
    usage(std::string(flag) + " " + text + ": expected a number in [" + std::to_string(lo) + ", " +
          std::to_string(hi) + "]");
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(flag + " needs a value");
    const char* v = argv[i + 1];
    if (flag == "--a")
      o.a = v;
    else if (flag == "--b")
      o.b = v;
    else if (flag == "--delay-ms")
      o.delay_ms = number("--delay-ms", v, 0, 60000);
    else if (flag == "--jitter-ms")
      o.jitter_ms = number("--jitter-ms", v, 0, 60000);
    else if (flag == "--loss")
      o.loss_pct = number("--loss", v, 0, 100);
    else if (flag == "--seed")
      o.seed = static_cast<unsigned>(number("--seed", v, 0, 4294967295.0));
    else
      usage("unknown option " + flag);
  }
  if (o.a.empty() || o.b.empty()) usage("--a and --b are required");
  if (o.jitter_ms > o.delay_ms) usage("--jitter-ms must not exceed --delay-ms");
  return o;
}

// A raw socket that receives every frame arriving on the interface (not those sent from it).
int open_port(const std::string& name) {
  const unsigned index = if_nametoindex(name.c_str());
  if (index == 0) usage("no interface '" + name + "'");
  const int fd = ::socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  if (fd < 0) usage(std::string("AF_PACKET socket: ") + std::strerror(errno) + " (needs root)");
  sockaddr_ll at{};
  at.sll_family = AF_PACKET;
  at.sll_protocol = htons(ETH_P_ALL);
  at.sll_ifindex = static_cast<int>(index);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0)
    usage("bind " + name + ": " + std::strerror(errno));
  return fd;
}

struct Frame {
  Clock::time_point due;
  std::vector<char> bytes;
};

// One direction of the link: what arrives on `in` leaves on `out`, late or not at all.
class Direction {
 public:
  Direction(int in, int out, const Options& o, unsigned seed)
      : in_(in), out_(out), o_(o), rng_(seed) {}

  void run() {
    std::thread sender([this] { send_loop(); });
    receive_loop();
    sender.join();
  }

 private:
  void receive_loop() {
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    std::vector<char> buf(65536);
    Clock::time_point last_due{};
    for (;;) {
      sockaddr_ll from{};
      socklen_t len = sizeof from;
      const ssize_t n =
          ::recvfrom(in_, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        std::perror("loom-netfault: recvfrom");
        std::exit(1);
      }
      if (from.sll_pkttype == PACKET_OUTGOING) continue;  // our own forwarding, seen on the way out
      if (o_.loss_pct > 0 && unit(rng_) * 100 < o_.loss_pct) continue;
      const double ms = o_.delay_ms + o_.jitter_ms * (2 * unit(rng_) - 1);
      Clock::time_point due =
          Clock::now() + std::chrono::microseconds(static_cast<int64_t>(ms * 1000));
      if (due < last_due) due = last_due;  // in order
      last_due = due;
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back({due, std::vector<char>(buf.begin(), buf.begin() + n)});
      ready_.notify_one();
    }
  }

  void send_loop() {
    for (;;) {
      Frame f;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return !queue_.empty(); });
        const Clock::time_point due = queue_.front().due;
        if (ready_.wait_until(lock, due, [&] { return Clock::now() >= due; }) == false) continue;
        f = std::move(queue_.front());
        queue_.pop_front();
      }
      while (::send(out_, f.bytes.data(), f.bytes.size(), 0) < 0 && errno == ENOBUFS)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  int in_, out_;
  const Options& o_;
  std::mt19937 rng_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Frame> queue_;
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const int a = open_port(o.a), b = open_port(o.b);
  Direction ab(a, b, o, o.seed), ba(b, a, o, o.seed + 1);
  std::printf("loom-netfault: forwarding %s <-> %s, delay %.1f ms +- %.1f ms, loss %.1f%%\n",
              o.a.c_str(), o.b.c_str(), o.delay_ms, o.jitter_ms, o.loss_pct);
  std::fflush(stdout);
  std::thread t([&] { ab.run(); });
  ba.run();
  t.join();
}
