#include "distributed/network.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/errors.hpp"

namespace loom::dist {

namespace {

std::string ipv4_text(const sockaddr* a) {
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, buf, sizeof buf);
  return buf;
}

std::string names_of(const std::vector<Interface>& all) {
  std::string out;
  for (const Interface& i : all) out += (out.empty() ? "" : ", ") + i.name + " (" + i.address + ")";
  return out.empty() ? "none" : out;
}

}  // namespace

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

std::vector<Interface> interfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    throw RuntimeError(std::string("cannot list network interfaces: ") + std::strerror(errno));
  std::vector<Interface> out;
  for (ifaddrs* i = list; i; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP))
      out.push_back({i->ifa_name, ipv4_text(i->ifa_addr)});
  ::freeifaddrs(list);
  return out;
}

Interface interface_named(const std::string& name, const std::string& what) {
  const std::vector<Interface> all = interfaces();
  for (const Interface& i : all)
    if (i.name == name) return i;
  throw ConfigError(what + " = \"" + name + "\": this host (" + host_name() +
                    ") has no such interface up with an IPv4 address; it has " + names_of(all));
}

std::string resolve_ipv4(const std::string& host, const std::string& what) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res)
    throw ConfigError(what + " = \"" + host +
                      "\" does not resolve to an IPv4 address: " + gai_strerror(rc));
  const std::string out = ipv4_text(res->ai_addr);
  ::freeaddrinfo(res);
  return out;
}

// A UDP socket "connected" to the address sends nothing, but the kernel picks the source address
// its route would use; the interface holding that address is the one.
Interface interface_toward(const std::string& ipv4) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);
  if (::inet_pton(AF_INET, ipv4.c_str(), &to.sin_addr) != 1)
    throw ConfigError("'" + ipv4 + "' is not an IPv4 address");
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  socklen_t len = sizeof from;
  const bool routed = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
                      ::getsockname(fd, reinterpret_cast<sockaddr*>(&from), &len) == 0;
  const std::string why = std::strerror(errno);
  if (fd >= 0) ::close(fd);
  if (!routed) throw RuntimeError("this host has no route to MASTER_ADDR " + ipv4 + ": " + why);
  const std::string source = ipv4_text(reinterpret_cast<sockaddr*>(&from));
  for (const Interface& i : interfaces())
    if (i.address == source) return i;
  return {"?", source};
}

InterfaceChoice choose_interface(const std::string& configured, const std::string& master_addr) {
  const std::string master =
      resolve_ipv4(master_addr, "MASTER_ADDR");  // checked whichever way the choice goes
  if (!configured.empty())
    return {interface_named(configured, "[parallel] interface"), "[parallel] interface"};
  for (const char* var : {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}) {
    const char* v = std::getenv(var);
    // NCCL's list syntax ("^docker,lo", "=eth0", "eth") is NCCL's to read; a plain name is taken.
    if (v && *v && !std::strpbrk(v, "^=,")) return {interface_named(v, var), var};
  }
  return {interface_toward(master), "route to MASTER_ADDR"};
}

void export_interface(const InterfaceChoice& choice) {
  const bool forced = choice.source == "[parallel] interface";
  ::setenv("GLOO_SOCKET_IFNAME", choice.nic.name.c_str(), forced);
  ::setenv("NCCL_SOCKET_IFNAME", choice.nic.name.c_str(), forced);
}

namespace {

// The first interface of this host that Open MPI's TCP transport may use: mpirun hands
// `--mca btl_tcp_if_include eth0,10.1.0.0/16` to the ranks as OMPI_MCA_btl_tcp_if_include, a list
// of names and CIDR ranges. Empty when the list is not set or matches nothing here.
Interface open_mpi_interface() {
  const char* list = std::getenv("OMPI_MCA_btl_tcp_if_include");
  if (!list || !*list) return {};
  const std::vector<Interface> here = interfaces();
  std::string entry;
  for (std::istringstream in(list); std::getline(in, entry, ',');) {
    const size_t slash = entry.find('/');
    for (const Interface& i : here) {
      if (slash == std::string::npos) {
        if (i.name == entry) return i;
        continue;
      }
      in_addr net{}, addr{};
      const int bits = std::atoi(entry.c_str() + slash + 1);
      if (bits < 0 || bits > 32 ||
          ::inet_pton(AF_INET, entry.substr(0, slash).c_str(), &net) != 1 ||
          ::inet_pton(AF_INET, i.address.c_str(), &addr) != 1)
        continue;
      const uint32_t mask = bits == 0 ? 0 : htonl(~uint32_t{0} << (32 - bits));
      if ((net.s_addr & mask) == (addr.s_addr & mask)) return i;
    }
  }
  return {};
}

}  // namespace

InterfaceChoice network_interface(const std::string& configured, const RankEnv& env,
                                  const std::string& comm) {
  if (configured.empty() && env.launcher == "mpi" && !std::getenv("MASTER_ADDR") && comm == "mpi") {
    const Interface nic = open_mpi_interface();
    if (!nic.name.empty()) return {nic, "Open MPI's btl_tcp_if_include"};
    return {{"chosen by Open MPI", ""}, "mpirun without MASTER_ADDR"};
  }
  InterfaceChoice choice = choose_interface(configured, env.master_addr);
  export_interface(choice);
  return choice;
}

namespace {
std::vector<std::pair<std::string, std::string>>& known_addresses() {
  static std::vector<std::pair<std::string, std::string>> known;
  return known;
}
}  // namespace

void remember_address(const std::string& address, const std::string& who) {
  if (address.empty()) return;
  for (auto& [a, w] : known_addresses())
    if (a == address) return void(w += "; " + who);  // one host holding several ranges of ranks
  known_addresses().emplace_back(address, who);
}

std::string name_addresses(const std::string& message) {
  std::string notes;
  for (const auto& [address, who] : known_addresses()) {
    // A whole address: "10.1.0.2" must not match inside "10.1.0.23".
    for (size_t at = message.find(address); at != std::string::npos;
         at = message.find(address, at + 1)) {
      const size_t end = at + address.size();
      const bool whole =
          (at == 0 || !std::isdigit(static_cast<unsigned char>(message[at - 1]))) &&
          (end == message.size() ||
           (!std::isdigit(static_cast<unsigned char>(message[end])) && message[end] != '.'));
      if (!whole) continue;
      notes += " [" + address + " is " + who + "]";
      break;
    }
  }
  return message + notes;
}

}  // namespace loom::dist
