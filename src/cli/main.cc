// primekv: a long-context inference engine with KV-cache compression.
#include <cstdio>

#include "cli/commands.h"

namespace primekv::cli {

int Fail(const std::string& message) {
  std::fprintf(stderr, "primekv: %s\n", message.c_str());
  return 1;
}

}  // namespace primekv::cli

int main(int argc, char** argv) {
  CLI::App app{"primekv: LLM inference with attention-score-free KV-cache compression"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "primekv 0.1.0");
  primekv::cli::Runner run;
  primekv::cli::AddInspect(app, run);
  primekv::cli::AddGenerate(app, run);
  primekv::cli::AddMakeModel(app, run);
  primekv::cli::AddLogits(app, run);
  primekv::cli::AddConvert(app, run);
  primekv::cli::AddListPresses(app, run);
  primekv::cli::AddPressScores(app, run);
  primekv::cli::AddFidelity(app, run);
  primekv::cli::AddEval(app, run);
  primekv::cli::AddBench(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return run ? run() : 1;
}
