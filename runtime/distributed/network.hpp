// Which network interface a rank talks on. Across nodes the default must be the interface that
// routes to MASTER_ADDR (the one the other nodes reach this host by), not whatever the hostname
// resolves to: on a cluster that is often a management network or 127.0.1.1.
#pragma once

#include <string>
#include <vector>

#include "distributed/rank_env.hpp"

namespace loom::dist {

struct Interface {
  std::string name;     // "eth0"
  std::string address;  // its IPv4 address, "10.1.2.3"
};

// This host's name (gethostname).
std::string host_name();

// Every IPv4 interface of this host that is up.
std::vector<Interface> interfaces();

// The interface called `name`; a ConfigError naming `what` (where the name came from) and the
// interfaces this host has when there is none.
Interface interface_named(const std::string& name, const std::string& what);

// `host` as an IPv4 address; a ConfigError naming `what` when it does not resolve.
std::string resolve_ipv4(const std::string& host, const std::string& what);

// The interface whose address this host uses to reach `ipv4` (the kernel's route choice).
Interface interface_toward(const std::string& ipv4);

// The interface a rank uses, and why: `configured` ([parallel] interface) when set, then
// GLOO_SOCKET_IFNAME, then NCCL_SOCKET_IFNAME, then the route to MASTER_ADDR.
struct InterfaceChoice {
  Interface nic;
  std::string source;  // "[parallel] interface", "GLOO_SOCKET_IFNAME", "route to MASTER_ADDR"
};
InterfaceChoice choose_interface(const std::string& configured, const std::string& master_addr);

// Makes the choice every backend's: sets GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME to it (the
// names gloo users and NCCL already honour), overriding them only when [parallel] interface set it.
void export_interface(const InterfaceChoice& choice);

// What a rank of a job does before its comm plugin starts: chooses and exports the interface.
// Under mpirun with no MASTER_ADDR, the mpi plugin needs no store and Open MPI picks its own
// interfaces: then the choice says so and sets nothing.
InterfaceChoice network_interface(const std::string& configured, const RankEnv& env,
                                  const std::string& comm);

// Who is behind an address, once the ranks have said (describe_hosts): name_addresses() appends
// "[10.1.0.2 is node1: ranks 2-3]" for each known address a message mentions, so a backend's
// "Read timeout [10.1.0.2]:4321" names the host and ranks that went silent.
void remember_address(const std::string& address, const std::string& who);
std::string name_addresses(const std::string& message);

}  // namespace loom::dist
