#include <doctest/doctest.h>

#include <thread>

#include "cli/job_config.hpp"
#include "config/config.hpp"
#include "config/section.hpp"
#include "core/errors.hpp"
#include "distributed/launch.hpp"
#include "distributed/mesh.hpp"
#include "distributed/store.hpp"

using namespace loom;
using namespace loom::dist;

TEST_CASE("the store sets, gets, adds, and times out with the key's name") {
  StoreServer server("127.0.0.1", 0);
  StoreClient a("127.0.0.1", server.port(), std::chrono::milliseconds(300));
  StoreClient b("127.0.0.1", server.port(), std::chrono::milliseconds(300));
  a.set("x", {'h', 'i'});
  CHECK(b.get("x") == Bytes{'h', 'i'});
  CHECK(b.check("x"));
  CHECK_FALSE(b.check("y"));
  CHECK(a.add("n", 2) == 2);
  CHECK(b.add("n", 3) == 5);
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    a.set("late", {'1'});
  });
  CHECK(b.get("late") == Bytes{'1'});  // get waits for the key
  later.join();
  try {
    b.get("never");
    FAIL("expected a timeout");
  } catch (const RuntimeError& e) {
    CHECK(std::string(e.what()).find("timed out after 0 s waiting for key 'never'") !=
          std::string::npos);
  }
}

TEST_CASE(
    "connecting to a store that is not there fails within the timeout, at the first request") {
  int port = free_port();
  auto t0 = std::chrono::steady_clock::now();
  try {
    StoreClient c("127.0.0.1", port,
                  std::chrono::milliseconds(200));  // connects lazily: the mpi plugin never asks
    c.set("k", Bytes{'v'});
    FAIL("expected an error");
  } catch (const RuntimeError& e) {
    CHECK(std::string(e.what()).find("cannot connect to 127.0.0.1:" + std::to_string(port)) !=
          std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
}

TEST_CASE("mesh coordinates put tp innermost and pp outermost") {
  MeshShape m;
  m.tp = 2, m.ep = 1, m.dp = 3, m.pp = 2;
  CHECK(m.world() == 12);
  for (int r = 0; r < 12; ++r) CHECK(rank_of(m, coord_of(m, r)) == r);
  Coord c = coord_of(m, 7);  // 7 = ((1 * 3 + 0) * 1 + 0) * 2 + 1
  CHECK(c.tp == 1);
  CHECK(c.dp == 0);
  CHECK(c.pp == 1);
  // dp groups: same tp and pp; keys are the dp coordinate.
  CHECK(split_for(m, 7, Axis::DP).color == split_for(m, 9, Axis::DP).color);  // 9: dp 1
  CHECK(split_for(m, 9, Axis::DP).key == 1);
  CHECK(split_for(m, 7, Axis::DP).color != split_for(m, 6, Axis::DP).color);  // 6: tp 0
}

TEST_CASE("mesh degrees come from [parallel], a mismatch with the world is an error") {
  config::Config auto_dp = config::Config::parse("[parallel]\ntp = 2\n", "m.toml");
  auto_dp.validate(loom::train::job_sections());
  CHECK(resolve_mesh(read_parallel(auto_dp.section("parallel")), 8).dp == 4);
  config::Config fixed = config::Config::parse("[parallel]\ndp = 3\n", "m.toml");
  fixed.validate(loom::train::job_sections());
  try {
    resolve_mesh(read_parallel(fixed.section("parallel")), 4);
    FAIL("expected an error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("dp=3 tp=1 pp=1 ep=1 needs 3 ranks, but the world has 4") !=
          std::string::npos);
  }
  try {
    resolve_mesh(read_parallel(auto_dp.section("parallel")), 3);
    FAIL("expected an error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("does not divide the world size 3") != std::string::npos);
  }
}

TEST_CASE("the first host of a Slurm nodelist, which defaults MASTER_ADDR under srun") {
  using loom::dist::first_host;
  CHECK(first_host("localhost") == "localhost");
  CHECK(first_host("node[03-05,9],login1") == "node03");
  CHECK(first_host("gpu-a[07-09,12]-ib,gpu-b1") == "gpu-a07-ib");
  CHECK(first_host("login1,node[1-2]") == "login1");
  CHECK(first_host("rack1-[12,14]") == "rack1-12");
  CHECK(first_host("r[1-2]-n[01-04]") == "r1-n01");
}

TEST_CASE("a job's store port is the same for every rank of it and differs between jobs") {
  using loom::dist::port_for_job;
  CHECK(port_for_job("1234.0") == port_for_job("1234.0"));
  CHECK(port_for_job("1234.0") != port_for_job("1234.1"));  // two steps of one allocation
  for (const char* job : {"1.0", "99999.3", "5046273"}) {
    CHECK(port_for_job(job) >= 20000);
    CHECK(port_for_job(job) < 32768);  // below Linux's ephemeral range
  }
}
