// `primekv serve`: flags only; the server lives in src/server.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "primekv/server/server.h"
#include "primekv/tokenizer/tokenizer.h"
#include "primekv/util/file_io.h"

namespace primekv::cli {

namespace {

struct ServeArgs {
  ServerOptions o;
  std::string mode = "multiturn";
  double kv_budget_mib = 256;
  double tenant_kv_mib = 0;
  bool session_dir_given = false;
  double max_body_kib = 1024;
  std::string api_key_file;
  bool no_prefix_reuse = false;
  bool no_ui = false;
  int max_header_kib = 32;
  int store_max_kib = 64 << 10;
};

// One key per line; blank lines and lines starting with '#' are skipped, spaces around a key
// are not part of it.
Status ReadApiKeys(const std::string& path, std::vector<std::string>& keys) {
  auto text = ReadFileCapped(path, "--api-key-file", FileSource::kRegular, uint64_t{1} << 20);
  if (!text.ok()) return text.status();
  size_t start = 0;
  while (start < text->size()) {
    size_t end = text->find('\n', start);
    if (end == std::string::npos) end = text->size();
    std::string line = text->substr(start, end - start);
    start = end + 1;
    const size_t a = line.find_first_not_of(" \t\r"), b = line.find_last_not_of(" \t\r");
    if (a == std::string::npos || line[a] == '#') continue;
    keys.push_back(line.substr(a, b - a + 1));
  }
  if (keys.empty()) return Status::Error("--api-key-file '" + path + "' holds no key");
  return Status::Ok();
}

// What the transport counts of the shortest request head that carries a key besides the key:
// the request line "GET /" (its path and 16 bytes) and "Authorization: Bearer " with ": " and
// CRLF (http.cc, CheckHead).
constexpr size_t kKeyHeadBytes = 1 + 16 + 13 + 7 + 4;

// A key too long for any request head within --max-header-kib could never match (every request
// sending it gets 431), so it is a usage error, caught at start.
std::optional<std::string> KeyPastHeadLimit(const ServerOptions& o, int max_header_kib) {
  std::vector<std::pair<std::string_view, const std::string*>> keys;
  for (const std::string& key : o.api_keys)
    keys.emplace_back("--api-key (or --api-key-file)", &key);
  keys.emplace_back("--metrics-key", &o.metrics_key);
  for (const auto& [flag, key] : keys) {
    if (key->size() + kKeyHeadBytes <= o.max_header_bytes) continue;
    return std::string(flag) + ": a key of " + std::to_string(key->size()) +
           " bytes cannot fit in a request head of --max-header-kib " +
           std::to_string(max_header_kib) + " (at most " +
           std::to_string(o.max_header_bytes - kKeyHeadBytes) +
           " bytes there), so it could never match";
  }
  return std::nullopt;
}

int RunServe(ServeArgs& a) {
  auto mode = ParseScheduleMode(a.mode);
  if (!mode) return Fail("--mode must be multiturn, context or decode");
  a.o.mode = *mode;
  if (!(a.kv_budget_mib >= 1 && a.kv_budget_mib <= 1 << 24))
    return Fail("--kv-budget-mib must be in [1, 16777216]");
  if (!(a.max_body_kib >= 1 && a.max_body_kib <= 1 << 20))
    return Fail("--max-body-kib must be in [1, 1048576]");
  if (!(a.tenant_kv_mib == 0 || (a.tenant_kv_mib >= 1 && a.tenant_kv_mib <= a.kv_budget_mib)))
    return Fail("--tenant-kv-mib must be 0 (an equal share) or in [1, --kv-budget-mib]");
  // An empty directory would put session files at the file system's root.
  if (a.session_dir_given && a.o.session_dir.empty())
    return Fail("--session-dir must not be empty (leave it out to keep sessions in memory)");
  a.o.kv_budget_bytes = static_cast<size_t>(a.kv_budget_mib * 1024 * 1024);
  a.o.tenant_kv_bytes = static_cast<size_t>(a.tenant_kv_mib * 1024 * 1024);
  a.o.max_body_bytes = static_cast<size_t>(a.max_body_kib * 1024);
  a.o.prefix_reuse = !a.no_prefix_reuse;
  a.o.ui = !a.no_ui;
  if (!a.api_key_file.empty()) {
    if (Status s = ReadApiKeys(a.api_key_file, a.o.api_keys); !s.ok()) return Fail(s.message());
  }
  a.o.max_header_bytes = static_cast<size_t>(a.max_header_kib) * 1024;
  a.o.store_max_bytes = static_cast<size_t>(a.store_max_kib) * 1024;
  if (Status s = ValidateServerOptions(a.o); !s.ok()) return Fail(s.message());
  if (auto message = KeyPastHeadLimit(a.o, a.max_header_kib)) return UsageError(*message);
  return RunServer(a.o);
}

// Where sessions are kept between turns: a directory, or Redis shared by replicas.
void AddStoreOptions(CLI::App* cmd, ServeArgs& a) {
  ServerOptions& o = a.o;
  auto* dir = cmd->add_option("--session-dir", o.session_dir,
                              "Directory for evicted and saved sessions (must be writable)")
                  ->each([&a](const std::string&) { a.session_dir_given = true; });
  cmd->add_option("--session-store", o.session_store,
                  "redis://HOST[:PORT][/DB]: sessions in Redis, shared by replicas (instead of "
                  "--session-dir)")
      ->excludes(dir)
      ->check(CLI::Validator(
          [](std::string& url) { return ValidateSessionStoreUrl(url).message(); }, "URL"));
  cmd->add_option("--store-ttl-s", o.store_ttl_s,
                  "Seconds a session stays in Redis after its last turn (0 = no expiry)")
      ->check(IntegerIn(0, 1 << 30))
      ->capture_default_str();
  cmd->add_option("--store-max-kib", a.store_max_kib,
                  "Largest session written to Redis (larger ones stay on their replica)")
      ->check(IntegerIn(1, 1 << 22))
      ->capture_default_str();
}

}  // namespace

// The HTTP transport's limits: sizes, connection counts and deadlines.
void AddHttpLimits(CLI::App* cmd, ServeArgs& a) {
  ServerOptions& o = a.o;
  cmd->add_option("--max-body-kib", a.max_body_kib,
                  "Largest request body (decompressed; 413 past it)")
      ->capture_default_str();
  cmd->add_option("--max-header-kib", a.max_header_kib,
                  "Largest request head (request line and headers; 431 past it)")
      ->check(IntegerIn(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--max-connections", o.max_connections,
                  "Open connections at most (each has its own thread)")
      ->check(IntegerIn(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--max-connections-per-ip", o.max_connections_per_ip,
                  "Open connections from one client address (0 = a quarter of --max-connections)")
      ->check(IntegerIn(0, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--header-deadline-s", o.header_deadline_s,
                  "Drop a connection whose request head is not in by then")
      ->check(IntegerIn(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--http-timeout-s", o.http_timeout_s,
                  "Close a connection idle (nothing read or written) this long")
      ->check(IntegerIn(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--request-deadline-s", o.request_deadline_s,
                  "Drop a connection whose request (head and body) is not in by then")
      ->check(IntegerIn(1, 1 << 20))
      ->capture_default_str();
}

void AddServe(CLI::App& app, Runner& run) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server; conversations keep compressed KV caches");
  ServerOptions& o = a->o;
  cmd->add_option("-m,--model", o.model_path, "GGUF model file")->required();
  AddNoMmap(*cmd, o.weight_memory);
  cmd->add_option("--host", o.host, "Address to bind (loopback by default)")->capture_default_str();
  cmd->add_option("--port", o.port, "Port (0 = any free port)")
      ->check(IntegerIn(0, 65535))
      ->capture_default_str();
  cmd->add_option("--port-file", o.port_file, "Write the bound port to this file");
  cmd->add_option("--press", o.press, "Compression method (primekv list-presses)")
      ->check(PressList(/*single=*/true))
      ->capture_default_str();
  cmd->add_option("--chat-template", o.chat_template,
                  "Chat template by name, overriding the model's: " + ChatFormatNames());
  cmd->add_option("--ratio", o.ratio, "Fraction of the KV cache to remove, in [0, 1)")
      ->check(RealIn(0, 1, false, /*hi_open=*/true))
      ->capture_default_str();
  cmd->add_option("--mode", a->mode, "multiturn | context | decode")
      ->check(OneOf({"multiturn", "multi-turn", "context", "decode"}))
      ->capture_default_str();
  cmd->add_option("--interval", o.interval, "Generated tokens between compressions (decode)")
      ->check(IntegerIn(1, 1 << 30))
      ->capture_default_str();
  cmd->add_option("--slots", o.slots, "Requests generating at once")
      ->check(IntegerIn(1, 256))
      ->capture_default_str();
  cmd->add_option("--api-key", o.api_keys,
                  "Require Authorization: Bearer KEY (not on /health); each key is a tenant "
                  "whose sessions no other key sees (repeatable)");
  cmd->add_option("--api-key-file", a->api_key_file, "Keys, one per line, as --api-key");
  cmd->add_option("--metrics-key", o.metrics_key,
                  "Key for GET /metrics, which shows every tenant's activity (with --api-key, "
                  "/metrics needs it; tenant keys get 403)");
  cmd->add_flag("--no-ui", a->no_ui,
                "No web page at / (the chat and cache view; the API is unchanged): 404 there");
  cmd->add_flag("--no-prefix-reuse", a->no_prefix_reuse,
                "A request that names no session starts afresh (no prefix matching; closes the "
                "timing channel inside a tenant)");
  cmd->add_option("-c,--ctx-size", o.ctx_size, "Context length (0 = the model's)")
      ->check(IntegerIn(0, 1 << 30))
      ->capture_default_str();
  cmd->add_flag("--allow-ctx-overflow", o.allow_ctx_overflow,
                "Allow --ctx-size above the model's trained context (warns)");
  cmd->add_option("--kv-budget-mib", a->kv_budget_mib, "KV cache budget for all sessions")
      ->capture_default_str();
  cmd->add_option("--tenant-kv-mib", a->tenant_kv_mib,
                  "KV cache one tenant (API key) may hold (0 = no cap: a tenant over an equal "
                  "share of the budget is evicted first)")
      ->capture_default_str();
  cmd->add_option("--memory-wait-s", o.memory_wait_s,
                  "How long a request over the KV budget waits for running turns (then 503)")
      ->check(IntegerIn(0, 1 << 20))
      ->capture_default_str();
  AddStoreOptions(cmd, *a);
  AddHttpLimits(cmd, *a);
  cmd->add_option("--max-tokens", o.default_max_tokens, "max_tokens when a request gives none")
      ->capture_default_str();
  cmd->add_option("-t,--threads", o.threads, "Threads (0 = all cores)")
      ->check(Threads())
      ->capture_default_str();
  cmd->callback([&run, a] { run = [a] { return RunServe(*a); }; });
}

}  // namespace primekv::cli
