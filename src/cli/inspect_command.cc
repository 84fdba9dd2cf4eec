#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "primekv/gguf/gguf.h"
#include "primekv/util/text.h"

namespace primekv::cli {

namespace {

std::string ValueToString(const GgufValue& v, bool full) {
  switch (v.type) {
    case GgufType::kUint8:
    case GgufType::kUint16:
    case GgufType::kUint32:
    case GgufType::kUint64:
      return std::to_string(v.u);
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64:
      return std::to_string(v.i);
    case GgufType::kFloat32:
    case GgufType::kFloat64: {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.9g", v.f);
      return buf;
    }
    case GgufType::kBool:
      return v.u ? "true" : "false";
    case GgufType::kString: {
      std::string_view s = v.s;
      bool cut = false;
      if (!full && s.size() > 80) {
        size_t end = 77;  // back to a character boundary
        while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xc0) == 0x80) --end;
        s = s.substr(0, end);
        cut = true;
      }
      return "\"" + TerminalSafe(s) + (cut ? "...\"" : "\"");
    }
    case GgufType::kArray: {
      std::string out = "[" + std::string(GgufTypeName(v.array_type)) + " x " +
                        std::to_string(v.array.size()) + "]";
      const size_t show = full ? v.array.size() : std::min<size_t>(v.array.size(), 5);
      if (show > 0) {
        out += " ";
        for (size_t i = 0; i < show; ++i) out += (i ? ", " : "") + ValueToString(v.array[i], false);
        if (show < v.array.size()) out += ", ...";
      }
      return out;
    }
  }
  return "?";
}

}  // namespace

void AddInspect(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("inspect", "Print a GGUF file's metadata and tensor table");
  auto path = std::make_shared<std::string>();
  auto full = std::make_shared<bool>(false);
  cmd->add_option("model", *path, "GGUF file")->required();
  cmd->add_flag("--full", *full, "Print whole arrays and strings");
  cmd->callback([&run, path, full] {
    run = [path, full] {
      auto f = GgufFile::Open(*path);
      if (!f.ok()) return Fail(f.message());
      std::printf("file: %s\nversion: %u\nalignment: %llu\ndata offset: %llu\nmetadata: %zu keys\n",
                  TerminalSafe(*path).c_str(), f->version(),
                  static_cast<unsigned long long>(f->alignment()),
                  static_cast<unsigned long long>(f->data_offset()), f->metadata().size());
      for (const auto& kv : f->metadata()) {
        std::printf("  %-48s %-8s %s\n", TerminalSafe(kv.key).c_str(),
                    std::string(GgufTypeName(kv.value.type)).c_str(),
                    ValueToString(kv.value, *full).c_str());
      }
      std::printf("tensors: %zu\n", f->tensors().size());
      std::printf("  %-40s %-6s %-24s %12s %12s\n", "name", "type", "shape (ne)", "offset",
                  "bytes");
      uint64_t total = 0;
      for (const auto& t : f->tensors()) {
        std::string shape = "[";
        for (size_t i = 0; i < t.ne.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.ne[i]);
        shape += "]";
        auto info = TypeInfo(t.type);
        std::printf("  %-40s %-6s %-24s %12llu %12llu\n", TerminalSafe(t.name).c_str(),
                    std::string(info ? info->name : "?").c_str(), shape.c_str(),
                    static_cast<unsigned long long>(t.offset),
                    static_cast<unsigned long long>(t.n_bytes));
        total += t.n_bytes;
      }
      std::printf("tensor bytes: %llu\n", static_cast<unsigned long long>(total));
      return 0;
    };
  });
}

}  // namespace primekv::cli
