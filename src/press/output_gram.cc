#include "primekv/press/output_gram.h"

#include <algorithm>

#include "primekv/quant/dense.h"
#include "primekv/quant/matmul.h"

namespace primekv {
namespace {

// row(r, out) writes row r of W_O (`width` floats).
std::vector<float> GramOfRows(const ModelConfig& c, int64_t rows_total, int width, int kv_head,
                              const std::function<void(int64_t, float*)>& row) {
  const int d = c.head_dim;
  constexpr int kRows = 256;
  std::vector<double> acc(static_cast<size_t>(d) * d, 0.0);
  std::vector<float> block(static_cast<size_t>(kRows) * width), part(static_cast<size_t>(d) * d);
  for (int64_t r0 = 0; r0 < rows_total; r0 += kRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kRows, rows_total - r0));
    for (int i = 0; i < rows; ++i) row(r0 + i, block.data() + static_cast<size_t>(i) * width);
    for (int g = 0; g < c.group(); ++g) {
      const float* slice = block.data() + static_cast<size_t>(kv_head * c.group() + g) * d;
      dense::GemmTN(d, d, rows, 1.0f, slice, width, slice, width, 0.0f, part.data(), d);
      for (size_t t = 0; t < acc.size(); ++t) acc[t] += part[t];
    }
  }
  return std::vector<float>(acc.begin(), acc.end());
}

}  // namespace

std::vector<float> OutputGram(const Model& model, int layer, int kv_head) {
  const WeightView& wo = model.layer(layer).wo;
  return GramOfRows(model.config(), wo.rows, static_cast<int>(wo.cols), kv_head,
                    [&](int64_t r, float* out) { GetRow(wo, r, out); });
}

std::vector<float> OutputGram(const ModelConfig& config, MatView<const float> wo, int kv_head) {
  return GramOfRows(config, wo.rows, static_cast<int>(wo.cols), kv_head,
                    [&](int64_t r, float* out) { std::copy_n(wo.Row(r), wo.cols, out); });
}

}  // namespace primekv
