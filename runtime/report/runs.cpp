#include "report/runs.hpp"

#include <fstream>
#include <regex>

#include "core/errors.hpp"
#include "core/files.hpp"

namespace loom::report {

std::string EventRow::field(const std::string& key) const {
  const std::string tag = "\"" + key + "\": ";
  size_t at = line.find(tag);
  if (at == std::string::npos) return "";
  at += tag.size();
  // A value ends at the comma or brace that closes it at depth 0 (strings hold no braces here
  // but may hold commas, so quotes are tracked too).
  int depth = 0;
  bool quoted = false;
  size_t end = at;
  for (; end < line.size(); ++end) {
    const char c = line[end];
    if (c == '"' && (end == 0 || line[end - 1] != '\\')) quoted = !quoted;
    if (quoted) continue;
    if (c == '[' || c == '{') ++depth;
    if (c == ']' || c == '}') {
      if (depth == 0) break;
      --depth;
    }
    if (c == ',' && depth == 0) break;
  }
  return line.substr(at, end - at);
}

double Run::mean(const std::string& key, size_t from) const {
  double sum = 0;
  int n = 0;
  for (size_t i = from; i < steps.size(); ++i) {
    const double x = steps[i].get(key);
    if (std::isfinite(x)) sum += x, ++n;
  }
  return n ? sum / n : NAN;
}

double Run::max(const std::string& key) const {
  double m = NAN;
  for (const auto& s : steps) {
    const double x = s.get(key);
    if (std::isfinite(x) && !(x <= m)) m = x;
  }
  return m;
}

double Run::last(const std::string& key) const {
  for (auto it = steps.rbegin(); it != steps.rend(); ++it)
    if (std::isfinite(it->get(key))) return it->get(key);
  return NAN;
}

Run read_run(const std::filesystem::path& dir) {
  Run run;
  run.dir = dir;
  const auto metrics = dir / "metrics.jsonl";
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec))
    throw RuntimeError("run directory '" + dir.string() + "' does not exist");
  if (!std::filesystem::is_directory(dir, ec))
    throw RuntimeError("'" + dir.string() + "' is a file, not a run directory");
  if (!std::filesystem::exists(metrics, ec))
    throw RuntimeError("'" + dir.string() + "' is not a run directory: no metrics.jsonl in it");
  std::ifstream in = open_input(metrics, "metrics file");
  static const std::regex pair("\"([^\"]+)\": (null|-?[0-9][-0-9.eE+]*)");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    StepRow row;
    for (auto it = std::sregex_iterator(line.begin(), line.end(), pair);
         it != std::sregex_iterator(); ++it)
      row.v[(*it)[1]] = (*it)[2] == "null" ? NAN : std::stod((*it)[2]);
    if (!row.has("step"))
      throw RuntimeError(metrics.string() + ":" + std::to_string(n) +
                         ": not a metrics line (no \"step\")");
    if (row.get("step") == 0 && !row.has("loss")) {
      run.initial_val_loss = row.get("val_loss");
      continue;
    }
    while (!run.steps.empty() && run.steps.back().get("step") >= row.get("step")) {
      run.steps.pop_back();
      ++run.superseded_rows;
    }
    run.steps.push_back(std::move(row));
  }
  if (in.bad())
    throw RuntimeError("cannot read metrics file '" + metrics.string() + "'" + os_reason());
  if (run.steps.empty())
    throw RuntimeError(
        "'" + metrics.string() +
        "' records no training step (did the run end before step 1?): nothing to read");
  std::ifstream ev(dir / "events.jsonl");
  static const std::regex head(
      "^\\{\"step\": ([0-9]+), \"layer\": \"([a-z]+)\", \"event\": \"([a-z_]+)\"");
  for (int n = 1; std::getline(ev, line); ++n) {
    std::smatch m;
    if (line.empty()) continue;
    if (!std::regex_search(line, m, head))
      throw RuntimeError((dir / "events.jsonl").string() + ":" + std::to_string(n) +
                         ": not an event line");
    run.events.push_back({std::stoll(m[1]), m[2], m[3], line});
  }
  std::ifstream links(dir / "links.json");
  static const std::regex to("^\\{\"to\": \"([^\"]*)\""),
      link("\\{\"host\": \"([^\"]*)\", \"mb_per_s\": ([0-9.eE+-]+)\\}");
  if (std::getline(links, line)) {
    std::smatch m;
    if (std::regex_search(line, m, to)) run.links_to = m[1];
    for (auto it = std::sregex_iterator(line.begin(), line.end(), link);
         it != std::sregex_iterator(); ++it)
      run.links.emplace_back((*it)[1], std::stod((*it)[2]));
  }
  std::ifstream ranks(dir / "ranks.json");
  static const std::regex number("[0-9]+");
  if (std::getline(ranks, line))
    for (auto it = std::sregex_iterator(line.begin(), line.end(), number);
         it != std::sregex_iterator(); ++it)
      run.peak_mem_per_rank.push_back(std::stod(it->str()));
  return run;
}

}  // namespace loom::report
