// libFuzzer target for the C API's pk_score (include/primekv.h): a caller's shape, counts,
// parameters, press spec and float values, through the argument checks and every scorer. The
// bytes either describe a layer whose arrays match its declared shape (a structural flaw such as
// an odd head_dim or heads not a multiple of KV heads allowed, values anything, NaN included),
// or a shape outside a documented bound, which must be refused before any array is read. Either
// way pk_score returns a status, with a message when it is not PK_OK, and never crashes.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "primekv.h"
#include "primekv/util/status.h"

namespace {

constexpr const char* kSpecs[] = {"primekv",
                                  "keydiff",
                                  "knorm",
                                  "streamingllm",
                                  "random",
                                  "lagkv:lag=4",
                                  "curdkv",
                                  "snapkv:window=4",
                                  "pyramidkv",
                                  "tova",
                                  "expected_attention",
                                  "oracle",
                                  "adakv:primekv",
                                  "adakv:snapkv",
                                  "kvzip",
                                  "none",
                                  "primekv:key=selfexact,value=wo_self",
                                  "primekv:combine=rank"};

float Value(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return 0.0f;
    case 1:
      return __builtin_nanf("");
    case 2:
      return __builtin_inff();
    case 3:
      return -1e30f;
    default:
      return in.ConsumeFloatingPointInRange<float>(-8.0f, 8.0f);
  }
}

std::vector<float> Floats(FuzzedDataProvider& in, size_t n) {
  std::vector<float> v(n);
  for (float& x : v) x = in.remaining_bytes() > 0 ? Value(in) : 0.5f;
  return v;
}

std::vector<int32_t> Positions(FuzzedDataProvider& in, size_t n, bool ascending) {
  std::vector<int32_t> v(n);
  int32_t at = in.ConsumeIntegralInRange<int32_t>(-2, 8);
  for (auto& p : v) {
    p = ascending ? at : in.ConsumeIntegralInRange<int32_t>(-4, 100);
    at += in.ConsumeIntegralInRange<int32_t>(ascending ? 1 : 0, 5);
  }
  return v;
}

// A shape outside one documented bound: refused before any array is read.
void Hostile(FuzzedDataProvider& in, const char* spec) {
  pk_score_input x = pk_score_input_default();
  x.n_heads = 4;
  x.n_kv_heads = 2;
  x.head_dim = 8;
  x.n = 6;
  static const int kBad[] = {0, -1, -7, 1 << 21, 1 << 30, 2147483647, -2147483647 - 1};
  const int bad = kBad[in.ConsumeIntegralInRange<size_t>(0, std::size(kBad) - 1)];
  switch (in.ConsumeIntegralInRange<int>(0, 6)) {
    case 0:
      x.n = bad;
      break;
    case 1:
      x.n_heads = bad;
      break;
    case 2:
      x.n_kv_heads = bad;
      break;
    case 3:
      x.head_dim = bad == 0 ? 1 : bad;
      break;
    case 4:
      x.n_window = bad == 0 ? -1 : -std::abs(bad % 1000) - 1;
      break;
    case 5:
      x.d_model = bad == 0 ? -1 : -std::abs(bad % 1000) - 1;
      break;
    default:
      x.n_context = bad == 0 ? -1 : -std::abs(bad % 1000) - 1;
      break;
  }
  float one = 0;
  int32_t pos = 0;
  x.keys = x.values = x.window_queries = x.context_queries = x.wo = &one;
  x.positions = x.window_positions = x.context_positions = &pos;
  float out[64];
  const pk_status s = pk_score(spec, &x, out, 64);
  primekv::Check(s == PK_ERR_ARGUMENT, "an out-of-bound shape is PK_ERR_ARGUMENT");
  primekv::Check(pk_last_error()[0] != '\0', "with a message");
}

void Consistent(FuzzedDataProvider& in, const std::string& spec) {
  pk_score_input x = pk_score_input_default();
  x.n_kv_heads = in.ConsumeIntegralInRange<int>(1, 3);
  x.n_heads =
      x.n_kv_heads * in.ConsumeIntegralInRange<int>(1, 3) + in.ConsumeIntegralInRange<int>(0, 1);
  x.head_dim = in.ConsumeIntegralInRange<int>(1, 9) * 2 - in.ConsumeIntegralInRange<int>(0, 1);
  x.n = in.ConsumeIntegralInRange<int>(1, 40);
  x.layer = in.ConsumeIntegralInRange<int>(-1, 3);
  x.n_layers = in.ConsumeIntegralInRange<int>(0, 3);
  x.next_position = in.ConsumeIntegralInRange<int32_t>(-1, 200);
  x.rope_base = in.ConsumeBool() ? Value(in) : 10000.0f;
  x.rope_half = in.ConsumeBool() ? 1 : 0;
  const size_t d = static_cast<size_t>(x.head_dim), width = static_cast<size_t>(x.n_heads) * d;
  const auto keys = Floats(in, static_cast<size_t>(x.n_kv_heads) * x.n * d);
  const auto values = Floats(in, keys.size());
  x.keys = keys.data();
  x.values = values.data();
  const auto positions =
      Positions(in, static_cast<size_t>(x.n), in.ConsumeIntegralInRange<int>(0, 7) != 0);
  if (in.ConsumeBool()) x.positions = positions.data();
  x.n_window = in.ConsumeIntegralInRange<int>(0, 6);
  const auto window = Floats(in, x.n_window * width);
  const auto window_pos = Positions(in, static_cast<size_t>(x.n_window), true);
  x.window_queries = x.n_window > 0 ? window.data() : nullptr;
  x.window_positions = x.n_window > 0 ? window_pos.data() : nullptr;
  x.d_model = in.ConsumeIntegralInRange<int>(0, 12);
  const size_t dm = x.d_model == 0 ? width : static_cast<size_t>(x.d_model);
  const auto wo = Floats(in, in.ConsumeBool() ? dm * width : 0);
  x.wo = wo.empty() ? nullptr : wo.data();
  x.n_context = in.ConsumeIntegralInRange<int>(0, 8);
  const auto context = Floats(in, x.n_context * width);
  const auto context_pos = Positions(in, static_cast<size_t>(x.n_context), true);
  x.context_queries = x.n_context > 0 ? context.data() : nullptr;
  x.context_positions = x.n_context > 0 ? context_pos.data() : nullptr;
  x.n_future = in.ConsumeIntegralInRange<int>(0, 4);
  const auto future = Floats(in, x.n_future * width);
  x.future_queries = x.n_future > 0 ? future.data() : nullptr;
  const size_t need = static_cast<size_t>(x.n_kv_heads) * x.n;
  std::vector<float> out(need + 1);
  const size_t capacity = in.ConsumeIntegralInRange<int>(0, 9) == 0 ? need - 1 : need;
  const pk_status s = pk_score(spec.c_str(), &x, out.data(), capacity);
  primekv::Check(s == PK_OK || s == PK_ERR_ARGUMENT || s == PK_ERR_BUFFER,
                 "pk_score answers OK, an argument error or a short buffer");
  if (s != PK_OK) primekv::Check(pk_last_error()[0] != '\0', "an error explains itself");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  std::string spec = in.ConsumeBool()
                         ? kSpecs[in.ConsumeIntegralInRange<size_t>(0, std::size(kSpecs) - 1)]
                         : in.ConsumeRandomLengthString(48);
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
    Hostile(in, spec.c_str());
  } else {
    Consistent(in, spec);
  }
  return 0;
}
