// When ranks issue different collectives (one skips an all_reduce, or passes another size), gloo
// either fails the operation on one rank ("connection reset") or aborts the process from its
// event loop (an uncaught enforce: a peer sent more bytes than this rank posted). Neither says
// what went wrong. So every failing rank publishes, through the rendezvous store, the collective
// it was running, numbered per communicator, and reads what the others published: the error then
// names the operation on every rank, with both sizes. Costs nothing while nothing fails.
// Internal to plugins/comm/gloo (included by gloo.cpp only).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include "communicator.hpp"

namespace {

std::mutex& live_mutex() {
  static std::mutex m;
  return m;
}
std::set<Comm*>& live() {
  static std::set<Comm*> s;
  return s;
}

void track(Comm* c, bool alive) {
  std::lock_guard<std::mutex> lock(live_mutex());
  if (alive)
    live().insert(c);
  else
    live().erase(c);
}

// Reports are numbered by a store counter so a reader fetches only keys that exist.
std::string report_key(const Comm& c) { return c.id + "failed"; }

// Publishes "group rank r: op" and returns its number (0 when the store is unreachable).
int64_t publish_failure(const Comm& c, const std::string& op) {
  loom::sdk::ErrorBox e(loom::sdk::detail::host());
  int64_t k = 0;
  if (c.store->add(c.store->self, report_key(c).c_str(), 1, &k, e.get()) != LOOM_OK) return 0;
  const std::string report = "group rank " + std::to_string(c.rank) + " was running " + op;
  const std::string key = report_key(c) + "/" + std::to_string(k);
  c.store->set(c.store->self, key.c_str(), report.data(), report.size(), e.get());
  return k;
}

// The reports other ranks published, waiting up to `patience` for at least one.
std::vector<std::string> peer_failures(const Comm& c, int64_t mine,
                                       std::chrono::milliseconds patience) {
  loom::sdk::ErrorBox e(loom::sdk::detail::host());
  const auto deadline = std::chrono::steady_clock::now() + patience;
  int64_t count = 0;
  for (;;) {
    if (c.store->add(c.store->self, report_key(c).c_str(), 0, &count, e.get()) != LOOM_OK)
      return {};
    if (count > (mine > 0 ? 1 : 0) || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<std::string> out;
  for (int64_t k = 1; k <= count; ++k) {
    if (k == mine) continue;
    const std::string key = report_key(c) + "/" + std::to_string(k);
    const void* p = nullptr;
    size_t n = 0;
    if (c.store->get(c.store->self, key.c_str(), &p, &n, e.get()) == LOOM_OK)
      out.emplace_back(static_cast<const char*>(p), n);
  }
  return out;
}

// Runs on the thread where gloo threw past its event loop: reports every collective this process
// was running, then exits with a message instead of SIGABRT.
std::terminate_handler previous_terminate = nullptr;
[[noreturn]] void on_gloo_abort() {
  std::string why = "an unknown exception";
  if (std::exception_ptr ex = std::current_exception()) {
    try {
      std::rethrow_exception(ex);
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
  }
  std::vector<std::pair<Comm*, std::string>> running;
  if (live_mutex().try_lock()) {
    for (Comm* c : live())
      if (std::string op = c->running_op(); !op.empty()) running.emplace_back(c, op);
    live_mutex().unlock();
  }
  if (running.empty() && previous_terminate) previous_terminate();
  for (auto& [c, op] : running) {
    publish_failure(*c, op);
    std::fprintf(stderr,
                 "loom: fatal: gloo stopped during %s (group rank %d of %d): %s. A peer sent "
                 "more than this rank expected: the ranks issued different collectives (one "
                 "skipped, added or resized an operation); the other ranks' errors name theirs.\n",
                 op.c_str(), c->rank, c->size, why.c_str());
  }
  std::fflush(stderr);
  _exit(1);
}

void install_abort_handler() {
  static std::once_flag once;
  std::call_once(once, [] { previous_terminate = std::set_terminate(on_gloo_abort); });
}

}  // namespace

// "all_reduce of 4 x f32 #57" -> 57 (-1 without a number).
int64_t number_of(const std::string& op) {
  const size_t hash = op.rfind('#');
  return hash == std::string::npos ? -1 : std::atoll(op.c_str() + hash + 1);
}

std::string Comm::failure_message(const std::string& op, const std::string& gloo_error) {
  std::string reports;
  std::vector<bool> reported(size, false);
  bool same_op = true;   // every peer that reported was stuck in this very operation
  bool adjacent = true;  // or in the one before or after it: a rank that got through first moved on
  reported[rank] = true;
  try {
    const int64_t mine = publish_failure(*this, op);
    for (const std::string& r : peer_failures(*this, mine, std::chrono::milliseconds(2000))) {
      reports += (reports.empty() ? "" : "; ") + r;
      int peer = -1;
      char tail[512] = {};
      if (std::sscanf(r.c_str(), "group rank %d was running %511[^\n]", &peer, tail) == 2 &&
          peer >= 0 && peer < size)
        reported[peer] = true;
      same_op = same_op && op == tail;
      adjacent = adjacent && std::llabs(number_of(tail) - number_of(op)) <= 1;
    }
  } catch (const std::exception&) {  // the store is gone too: say what is known
  }
  const std::string where =
      op + " over " + std::to_string(size) + " ranks failed on group rank " + std::to_string(rank);
  std::string silent;
  for (int r = 0; r < size; ++r)
    if (!reported[r]) silent += (silent.empty() ? "" : ", ") + std::to_string(r);
  // The ranks that could say so were all in this operation: the rest never got there, or cannot
  // be reached. That is a lost peer (a cut link, a frozen or dead node), not a disagreement.
  if (!reports.empty() && same_op && !silent.empty())
    return where + ", while " + reports + ": the same operation; group rank(s) " + silent +
           " did not report and are unreachable, stopped or dead. gloo: " + gloo_error;
  // One collective apart, with ranks missing: a rank that got its part through went on to the
  // next one before the lost peer stopped the rest. Different sizes at one number are caught by
  // the signature check (compare_with_neighbours), so this is not a disagreement.
  if (!reports.empty() && adjacent && !silent.empty())
    return where + ", while " + reports +
           " (one collective apart: a rank that finished its part moved on); group " + "rank(s) " +
           silent + " did not report and are unreachable, stopped or dead. gloo: " + gloo_error;
  if (!reports.empty() && !same_op)
    return where + ", while " + reports + ": the ranks issued different collectives (every rank " +
           "must issue the same ones, in the same order, with the same sizes). gloo: " + gloo_error;
  // gloo names the peer by address; the ring neighbours are who it was talking to.
  return where + " (its ring neighbours in this group: ranks " + std::to_string(prev()) + " and " +
         std::to_string((rank + 1) % size) + "): " + gloo_error;
}

// all_to_all's blocks may differ between ranks (MoE token counts): only its name is compared.
void Comm::compare_with_neighbours(const std::string& what, const std::string& name) {
  constexpr size_t kBytes = 96;
  char mine[kBytes] = {}, theirs[kBytes] = {};
  const std::string signature = what.rfind("all_to_all", 0) == 0 ? "all_to_all" : what;
  std::snprintf(mine, kBytes, "%s", signature.c_str());
  const int slot = static_cast<int>(ctx->nextSlot());
  auto recv = ctx->getPair(prev())->createRecvBuffer(slot, theirs, kBytes);
  auto send = ctx->getPair(next(0))->createSendBuffer(slot, mine, kBytes);
  send->send(0, kBytes);
  try {
    recv->waitRecv();
  } catch (...) {
    try {
      send->waitSend();
    } catch (...) {
    }
    throw;
  }
  send->waitSend();
  if (std::strncmp(mine, theirs, kBytes) != 0)
    throw Error(LOOM_FATAL,
                name + ": group rank " + std::to_string(rank) + " runs " + mine + ", group rank " +
                    std::to_string(prev()) + " runs " + theirs +
                    " (every rank must issue the same collectives with the same sizes)");
}
