#include <cstdio>

#include "cli/commands.h"
#include "primekv/press/press.h"
#include "primekv/press/profile_locator.h"

namespace primekv::cli {

void AddListPresses(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("list-presses", "List the compression methods");
  cmd->callback([&run] {
    run = [] {
      std::printf("%-20s %-11s %s\n", "press", "query-free", "what (source)");
      for (const PressInfo& p : ListPresses()) {
        const char* free = p.wraps_press ? "as inner" : p.query_free ? "yes" : "no";
        std::printf("%-20s %-11s %s (%s)\n", p.name.c_str(), free, p.summary.c_str(),
                    p.source.c_str());
      }
      // What each bare name means today: eval records this text per press in config.json.
      std::printf("\nDefaults (a bare name resolves to):\n");
      for (const PressInfo& p : ListPresses()) {
        auto spec = ParsePressSpec(p.name);
        if (!spec.ok()) continue;  // "adakv:<press>": the wrapped press's own defaults
        auto press = MakePress(*spec);
        if (press.ok()) std::printf("  %-20s %s\n", p.name.c_str(), press->resolved.c_str());
      }
      std::printf(
          "\nCalibrated: primekv:profile=auto keeps in each KV head the share KVzip's allocation\n"
          "gives it (the model's budget profile, nested below %.1f), in one pass: beside\n"
          "MODEL.gguf as MODEL.budget.json, else the cached one that `primekv calibrate -m\n"
          "MODEL.gguf` writes. The default stays plain primekv, the paper's score\n"
          "(docs/results.md section 8).\n",
          kAutoProfileNest);
      std::printf(
          "\nParameters: NAME:key=value,key=value, e.g. primekv:key=cosine,value=norm;\n"
          "adakv:<press> gives any scorer head-adaptive budgets, e.g. adakv:snapkv:window=32.\n"
          "Lists (eval --presses, fidelity --presses): separate presses with ';', e.g.\n"
          "  --presses \"none;primekv:key=cosine,value=norm;snapkv:window=32,kernel=3\"\n"
          "or with ',' (a key=value item continues the press before it), or repeat the flag.\n");
      return 0;
    };
  });
}

}  // namespace primekv::cli
