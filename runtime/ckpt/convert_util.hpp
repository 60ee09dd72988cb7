// Pieces shared by the converters (hf_import.cpp, llmc.cpp, hf_export.cpp): tensor reshaping into
// Loom's layouts and the [model] TOML lines an import writes. Internal to runtime/ckpt.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/external_model.hpp"
#include "core/errors.hpp"

namespace loom::ckpt::convert {

// [out, in] from a [in, out] matrix (GPT-2's Conv1D stores its weights transposed).
inline std::vector<float> transpose(const std::vector<float>& a, int64_t rows, int64_t cols) {
  std::vector<float> t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = a[r * cols + c];
  return t;
}

// `a` (cols wide) zero-padded to `padded` rows: a vocabulary padded to a multiple of 64, as
// Loom's embedding and head are.
inline std::vector<float> pad_rows(std::vector<float> a, int64_t cols, int64_t padded) {
  a.resize(static_cast<size_t>(padded * cols), 0.f);
  return a;
}

// Rows [first, first + n) of a matrix `cols` wide.
inline std::vector<float> row_block(const std::vector<float>& a, int64_t first, int64_t n,
                                    int64_t cols) {
  return std::vector<float>(a.begin() + first * cols, a.begin() + (first + n) * cols);
}

// a's rows over b's. Arguments are read in an unspecified order, so callers read a first.
inline std::vector<float> concat(std::vector<float> a, const std::vector<float>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Builder {
  ExternalModel m;
  void put(const std::string& name, std::vector<int64_t> shape, std::vector<float> data) {
    m.shapes[name] = std::move(shape);
    m.tensors[name] = std::move(data);
  }
};

// A shape's size from a header or config.json: every one of them counts something, so it must be
// >= 1 (a 0 would divide by zero in import, generate and init_from).
inline int64_t positive(int64_t v, const std::string& what, const std::string& whose) {
  if (v < 1)
    throw RuntimeError(whose + " \"" + what + "\" = " + std::to_string(v) + " must be at least 1");
  return v;
}

inline std::string toml_line(const std::string& k, const std::string& v) {
  return k + " = " + v + "\n";
}
inline std::string num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", x);
  std::string s = b;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// A Hugging Face folder (hf_import.cpp) and an llm.c model file (llmc.cpp).
ExternalModel read_hf(const std::filesystem::path& dir);
ExternalModel read_llmc(const std::filesystem::path& file);

}  // namespace loom::ckpt::convert
