// pk_* entry points for versions, errors, models, tokens and the press registry.
#include <algorithm>
#include <cstring>
#include <string>

#include "capi/capi_internal.h"
#include "primekv/press/press.h"

namespace primekv::capi {

namespace {
// This thread's last error, as errno is: a C caller reads it right after the failing call.
thread_local std::string last_error;  // NOLINT(misc-use-anonymous-namespace)
}  // namespace

pk_status Fail(pk_status code, std::string message) {
  last_error = std::move(message);
  return code;
}

void Release(pk_model* model) {
  if (model != nullptr && model->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete model;
}

ModelRef Retain(pk_model* model) {
  model->refs.fetch_add(1, std::memory_order_relaxed);
  return ModelRef(model);
}

const Model& ModelForContext(const pk_model& model, int ctx_size) {
  if (model.other_rope != nullptr &&
      UsesLongRopeFactors(model.model.config(), ctx_size) != model.model.config().rope_long_factors)
    return *model.other_rope;
  return model.model;
}

pk_status SessionUse::Check(const char* where) const {
  if (s_ == nullptr) return Fail(PK_ERR_ARGUMENT, std::string(where) + ": session is NULL");
  if (!held_)
    return Fail(PK_ERR_STATE, std::string(where) +
                                  ": the session is in use by another call (a session takes "
                                  "one call at a time)");
  return PK_OK;
}

pk_status FromStatus(const char* where, const Status& s, pk_status code) {
  if (s.ok()) return PK_OK;
  return Fail(code, std::string(where) + ": " + s.message());
}

}  // namespace primekv::capi

using primekv::capi::Fail;
using primekv::capi::Guard;

extern "C" {

int pk_api_version(void) { return PK_API_VERSION; }
const char* pk_version(void) { return PRIMEKV_VERSION; }
const char* pk_last_error(void) { return primekv::capi::last_error.c_str(); }

pk_status pk_model_load(const char* path, pk_model** out) {
  return Guard("pk_model_load", [&] {
    PK_REQUIRE(out != nullptr, "pk_model_load", "out is NULL");
    *out = nullptr;
    PK_REQUIRE(path != nullptr, "pk_model_load", "path is NULL");
    auto model = primekv::Model::Load(path);
    if (!model.ok()) return Fail(PK_ERR_IO, "pk_model_load: " + model.message());
    std::unique_ptr<primekv::Model> other_rope;
    if (const primekv::ModelConfig& c = model->config();
        c.long_rope && c.rope_original_context > 0) {
      // A context size on the other side of the original context length than the trained one.
      auto other = primekv::Model::Load(
          path, primekv::WeightMemory::kMapped,
          c.rope_long_factors ? c.rope_original_context : int64_t{c.rope_original_context} + 1);
      if (!other.ok()) return Fail(PK_ERR_IO, "pk_model_load: " + other.message());
      other_rope = std::make_unique<primekv::Model>(std::move(other).value());
    }
    auto* m = new pk_model{std::move(model).value(), std::move(other_rope), {}};
    m->arch = m->model.config().arch_name;
    *out = m;
    return PK_OK;
  });
}

void pk_model_free(pk_model* model) { primekv::capi::Release(model); }

pk_status pk_model_get_info(const pk_model* model, pk_model_info* out) {
  return Guard("pk_model_get_info", [&] {
    PK_REQUIRE(model != nullptr && out != nullptr, "pk_model_get_info", "NULL argument");
    const primekv::ModelConfig& c = model->model.config();
    const primekv::TokenizerSpec& t = model->model.tokenizer().spec();
    *out = {model->arch.c_str(), c.n_layers,   c.d_model,     c.n_heads, c.n_kv_heads,
            c.head_dim,          c.vocab_size, c.max_context, t.bos,     t.eos};
    return PK_OK;
  });
}

pk_status pk_tokenize(const pk_model* model, const char* text, size_t text_len, int add_bos,
                      int32_t* tokens, size_t capacity, size_t* n_tokens) {
  return Guard("pk_tokenize", [&] {
    PK_REQUIRE(model != nullptr && n_tokens != nullptr, "pk_tokenize", "NULL argument");
    PK_REQUIRE(text != nullptr || text_len == 0, "pk_tokenize", "text is NULL");
    PK_REQUIRE(tokens != nullptr || capacity == 0, "pk_tokenize", "tokens is NULL");
    const auto ids = model->model.tokenizer().Encode(
        std::string_view(text == nullptr ? "" : text, text_len), add_bos != 0);
    *n_tokens = ids.size();
    if (ids.size() > capacity)
      return Fail(PK_ERR_BUFFER, "pk_tokenize: " + std::to_string(ids.size()) +
                                     " tokens do not fit a buffer of " + std::to_string(capacity));
    std::copy(ids.begin(), ids.end(), tokens);
    return PK_OK;
  });
}

pk_status pk_detokenize(const pk_model* model, const int32_t* tokens, size_t n, char* text,
                        size_t capacity, size_t* text_len) {
  return Guard("pk_detokenize", [&] {
    PK_REQUIRE(model != nullptr && text_len != nullptr, "pk_detokenize", "NULL argument");
    PK_REQUIRE(tokens != nullptr || n == 0, "pk_detokenize", "tokens is NULL");
    PK_REQUIRE(text != nullptr || capacity == 0, "pk_detokenize", "text is NULL");
    const int vocab = model->model.config().vocab_size;
    for (size_t i = 0; i < n; ++i) {
      if (tokens[i] < 0 || tokens[i] >= vocab)
        return Fail(PK_ERR_ARGUMENT, "pk_detokenize: token " + std::to_string(tokens[i]) + " at " +
                                         std::to_string(i) + " is outside [0, " +
                                         std::to_string(vocab) + ")");
    }
    const std::string s = model->model.tokenizer().Decode({tokens, n}, false);
    *text_len = s.size();
    if (s.size() > capacity)
      return Fail(PK_ERR_BUFFER, "pk_detokenize: " + std::to_string(s.size()) +
                                     " bytes do not fit a buffer of " + std::to_string(capacity));
    if (!s.empty()) std::memcpy(text, s.data(), s.size());
    return PK_OK;
  });
}

size_t pk_press_count(void) { return primekv::ListPresses().size(); }

const char* pk_press_name(size_t i) {
  const auto presses = primekv::ListPresses();
  return i < presses.size() ? presses[i].name.c_str() : nullptr;
}

int pk_press_query_free(size_t i) {
  const auto presses = primekv::ListPresses();
  return i < presses.size() && presses[i].query_free ? 1 : 0;
}

}  // extern "C"
