// primekv: a long-context inference engine with KV-cache compression.
#include <cstdio>
#include <new>
#include <string>

#include "cli/commands.h"
#include "cli/version.h"
#include "primekv/util/file_io.h"

namespace primekv::cli {

int Fail(const std::string& message) {
  std::fprintf(stderr, "primekv: %s\n", message.c_str());
  return 1;
}

int UsageError(const std::string& message) {
  std::fprintf(stderr, "primekv: %s\n", message.c_str());
  return 2;
}

namespace {

// Exit status of a usage error (bad flag or value), as with most Unix tools.
constexpr int kUsage = 2;

// Like `git` without a command: the subcommands, one line each.
int ListSubcommands(const CLI::App& app) {
  std::fprintf(stderr, "usage: primekv <command> [options]   (primekv <command> --help)\n\n");
  std::fprintf(stderr, "commands:\n");
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    std::fprintf(stderr, "   %-14s %s\n", sub->get_name().c_str(), sub->get_description().c_str());
  }
  return kUsage;
}

}  // namespace

}  // namespace primekv::cli

int main(int argc, char** argv) {
  CLI::App app{"primekv: LLM inference with attention-score-free KV-cache compression"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", primekv::cli::kVersionLine);
  namespace cli = primekv::cli;
  cli::Runner run;
  for (cli::AddCommand* add :
       {cli::AddInspect, cli::AddGenerate, cli::AddMakeModel, cli::AddLogits, cli::AddConvert,
        cli::AddListPresses, cli::AddPressScores, cli::AddFidelity, cli::AddEval, cli::AddTokenize,
        cli::AddServe, cli::AddBench, cli::AddCalibrate}) {
    add(app, run);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line naming the option; the subcommand's --help has the rest.
    std::string message = e.what();
    for (char& c : message)
      if (c == '\n') c = ' ';
    std::string where = "primekv";
    for (const CLI::App* sub : app.get_subcommands()) where += " " + sub->get_name();
    std::fprintf(stderr, "primekv: %s (see %s --help)\n", message.c_str(), where.c_str());
    return primekv::cli::kUsage;
  }
  if (app.get_subcommands().empty()) return primekv::cli::ListSubcommands(app);
  if (!run) return 1;
  // Library code reports errors as Status; this only turns an allocation failure (a request
  // too large for the machine) into a message instead of an abort.
  int status = 0;
  try {
    status = run();
  } catch (const std::bad_alloc&) {
    return primekv::cli::Fail("out of memory (the request needs more memory than is available)");
  }
  // Output that never reached its file (a full disk, a closed pipe) is a failure, not exit 0.
  if (primekv::Status s = primekv::FlushChecked(stdout, "standard output"); !s.ok()) {
    primekv::cli::Fail(s.message());
    return status != 0 ? status : 1;
  }
  return status;
}
