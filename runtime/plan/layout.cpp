#include "plan/layout.hpp"

#include <sstream>

#include "core/errors.hpp"

namespace loom::plan {

std::string Layout::name() const {
  std::string s = "dp" + std::to_string(dp);
  if (tp > 1) s += " tp" + std::to_string(tp) + (sp ? "+sp" : "");
  if (pp > 1)
    s += " pp" + std::to_string(pp) + " " + schedule +
         (chunks > 1 ? "x" + std::to_string(chunks) : "");
  if (cp > 1) s += " cp" + std::to_string(cp);
  if (ep > 1) s += " ep" + std::to_string(ep);
  if (zero) s += " zero" + std::to_string(zero);
  s += " mb" + std::to_string(micro_batch);
  if (recompute != "none") s += " " + recompute;
  return s;
}

Layout parse_layout(const std::string& text) {
  Layout l;
  std::string t = text;
  for (char& ch : t)
    if (ch == ',' || ch == '=' || ch == '+') ch = ' ';
  std::istringstream in(t);
  std::string tok;
  auto number = [&](const std::string& word, size_t skip) {
    try {
      size_t used = 0;
      int v = std::stoi(word.substr(skip), &used);
      if (used + skip == word.size() && v >= 1) return v;
    } catch (...) {
    }
    throw ConfigError("layout '" + text + "': '" + word + "' needs a positive number");
  };
  std::string pending;
  while (in >> tok) {
    if (!pending.empty()) tok = pending + tok, pending.clear();
    auto starts = [&](const char* p) { return tok.rfind(p, 0) == 0; };
    if (tok == "sp")
      l.sp = true;
    else if (tok == "none" || tok == "selective" || tok == "full" || tok == "selective-op" ||
             tok == "selective-megatron")
      l.recompute = tok;
    else if (tok == "gpipe" || tok == "1f1b" || tok == "interleaved" || tok == "zbh1")
      l.schedule = tok;
    else if (starts("interleavedx"))
      l.schedule = "interleaved", l.chunks = number(tok, 12);
    else if (tok == "dp" || tok == "tp" || tok == "pp" || tok == "cp" || tok == "ep" ||
             tok == "zero" || tok == "mb")
      pending = tok;
    else if (starts("zero"))
      l.zero = number(tok, 4);
    else if (starts("mb"))
      l.micro_batch = number(tok, 2);
    else if (starts("dp"))
      l.dp = number(tok, 2);
    else if (starts("tp"))
      l.tp = number(tok, 2);
    else if (starts("pp"))
      l.pp = number(tok, 2);
    else if (starts("cp"))
      l.cp = number(tok, 2);
    else if (starts("ep"))
      l.ep = number(tok, 2);
    else
      throw ConfigError("layout '" + text + "': unknown part '" + tok +
                        "' (dpN tpN pp N cpN epN zeroN mbN sp, a schedule, a recompute policy)");
  }
  if (l.zero > 3) throw ConfigError("layout '" + text + "': zero stages are 1, 2 and 3");
  if (l.schedule == "interleaved" && l.chunks < 2) l.chunks = 2;
  return l;
}

}  // namespace loom::plan
