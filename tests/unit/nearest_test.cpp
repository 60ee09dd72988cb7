#include "core/nearest.hpp"

#include <doctest/doctest.h>

using namespace loom;

TEST_CASE("edit distance counts single-character edits") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("seed", "seed") == 0);
  CHECK(edit_distance("sede", "seed") == 1);  // one swap
  CHECK(edit_distance("stpes", "steps") == 1);
  CHECK(edit_distance("cdua", "cpu") == 2);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("", "abc") == 3);
}

TEST_CASE("nearest suggests plausible typos only") {
  std::vector<std::string> keys = {"seed", "steps", "threads", "device"};
  CHECK(nearest("stpes", keys) == "steps");
  CHECK(nearest("thread", keys) == "threads");
  CHECK(nearest("completely_different", keys).empty());
  CHECK(did_you_mean("devise", keys) == "; did you mean 'device'?");
  CHECK(did_you_mean("zzzzzzzz", keys).empty());
}
