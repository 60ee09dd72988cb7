// A checkpoint writer that stores files in a form of its own, as a compressing, bundling or
// object-store writer does: every file is kept as <name>.scr, each byte XOR-ed with 0x5a behind
// an 8-byte header. The runtime cannot read those files directly, so resume, verify and export
// work only through the read path (CkptReader: read and list). It also appends each commit notice
// to <root>/commits.log, so a test can see committed() arrive.
#include <filesystem>
#include <fstream>
#include <loom/sdk.hpp>
#include <sstream>

namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'S', 'C', 'R', 'A', 'M', 'B', 'L', 'E'};

class Scramble : public loom::sdk::CkptReader {
 public:
  static constexpr loom::sdk::About about{
      .name = "scramble",
      .version = "0.0.1",
      .summary = "checkpoint files XOR-scrambled (a writer with a format of its own)"};

  explicit Scramble(const loom::sdk::Context&) {}

  void open(const std::string& root, int rank, int) override {
    root_ = root;
    rank_ = rank;
  }
  void save(const std::string& dir, const std::string& file, const void* data,
            size_t bytes) override {
    std::string out(kMagic, sizeof kMagic);
    out.append(static_cast<const char*>(data), bytes);
    for (size_t i = sizeof kMagic; i < out.size(); ++i) out[i] ^= 0x5a;
    std::ofstream f(fs::path(dir) / (file + ".scr"), std::ios::binary);
    if (!f.write(out.data(), static_cast<std::streamsize>(out.size())) || !f.flush())
      throw loom::sdk::Error(
          LOOM_SYSTEM, "scramble: cannot write " + (fs::path(dir) / (file + ".scr")).string());
  }
  std::string read(const std::string& dir, const std::string& file) override {
    std::ifstream f(fs::path(dir) / (file + ".scr"), std::ios::binary);
    if (!f)
      throw loom::sdk::Error(LOOM_SYSTEM,
                             "scramble: no " + (fs::path(dir) / (file + ".scr")).string());
    std::stringstream s;
    s << f.rdbuf();
    std::string bytes = s.str();
    if (bytes.compare(0, sizeof kMagic, std::string(kMagic, sizeof kMagic)) != 0)
      throw loom::sdk::Error(LOOM_SYSTEM, "scramble: " + file + " is not a scrambled file");
    bytes.erase(0, sizeof kMagic);
    for (char& c : bytes) c ^= 0x5a;
    return bytes;
  }
  std::vector<std::string> list(const std::string& dir) override {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".scr") names.push_back(e.path().stem().string());
    return names;
  }
  void committed(const std::string& dir, int64_t step) override {
    std::ofstream(fs::path(root_) / "commits.log", std::ios::app)
        << "rank " << rank_ << " step " << step << " " << fs::path(dir).filename().string() << "\n";
  }

 private:
  std::string root_;
  int rank_ = 0;
};

}  // namespace

LOOM_PLUGIN(loom::sdk::ckpt_plugin<Scramble>())
