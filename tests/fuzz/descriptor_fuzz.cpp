// A plugin descriptor as a library might return it: the version, kind, slot, table size, which
// entries are set, and an option schema whose names, types and default literals come from the
// input. check_descriptor must refuse what is wrong; an accepted schema then goes through the
// config's option validation, which parses the defaults.
#include <cstring>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/schema.hpp"
#include "fuzz_input.hpp"
#include "loader/descriptor.hpp"

namespace {

loom_status create(const loom_host*, const loom_options*, void**, loom_error*) { return LOOM_OK; }
void destroy(void*) {}

// Reads from the input front to back; past the end, zeros and empty strings.
struct Input {
  const uint8_t* p;
  size_t n;
  template <class T>
  T take() {
    T v{};
    const size_t k = std::min(sizeof(T), n);
    std::memcpy(&v, p, k);
    p += k, n -= k;
    return v;
  }
  std::string text() {
    const size_t len = std::min<size_t>(take<uint8_t>() % 24, n);
    std::string s(reinterpret_cast<const char*>(p), len);
    p += len, n -= len;
    return s;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  alignas(16) unsigned char table[1024] = {};
  auto* d = reinterpret_cast<loom_plugin*>(table);
  d->v.major = in.take<uint16_t>() % 3;
  d->v.minor = in.take<uint16_t>() % 8;
  d->v.size = in.take<uint16_t>() % sizeof table;
  d->kind = in.take<int8_t>();
  d->slot = in.take<int8_t>();
  const uint8_t set = in.take<uint8_t>();
  const std::string name = in.text();
  d->name = set & 1 ? name.c_str() : nullptr;
  d->create = set & 2 ? &create : nullptr;
  d->destroy = set & 4 ? &destroy : nullptr;
  const int n_options = in.take<uint8_t>() % 6;
  std::vector<std::string> names, defaults, helps;
  for (int i = 0; i < n_options; ++i)
    names.push_back(in.text()), defaults.push_back(in.text()), helps.push_back(in.text());
  std::vector<loom_option_spec> specs;
  for (int i = 0; i < n_options; ++i)
    specs.push_back({names[i].c_str(), static_cast<int32_t>(in.take<uint8_t>() % 5),
                     defaults[i].c_str(), helps[i].c_str()});
  specs.push_back({nullptr, 0, nullptr, nullptr});
  d->options = set & 8 ? specs.data() : nullptr;
  loom::fuzz::expect_clean([&] {
    loom::plugins::check_descriptor(d, "fuzz.so");
    loom::config::Config c = loom::config::Config::parse("[plugins]\n", "fuzz.toml");
    c.validate_plugin_options(name, loom::config::plugin_keys(d->options));
  });
  return 0;
}
