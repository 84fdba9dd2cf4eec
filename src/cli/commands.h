// Subcommands of the `primekv` binary: each registers its flags and a run callback.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace primekv::cli {

// Each Add* registers one subcommand on `app`; `run` receives the callback that returns the
// process exit code once the command line has parsed.
using Runner = std::function<int()>;
void AddInspect(CLI::App& app, Runner& run);
void AddGenerate(CLI::App& app, Runner& run);
void AddMakeModel(CLI::App& app, Runner& run);
void AddLogits(CLI::App& app, Runner& run);
void AddConvert(CLI::App& app, Runner& run);
void AddListPresses(CLI::App& app, Runner& run);
void AddPressScores(CLI::App& app, Runner& run);
void AddFidelity(CLI::App& app, Runner& run);
void AddEval(CLI::App& app, Runner& run);
void AddTokenize(CLI::App& app, Runner& run);
void AddServe(CLI::App& app, Runner& run);
void AddBench(CLI::App& app, Runner& run);

// Prints "primekv: <message>" to stderr and returns the exit code for errors.
int Fail(const std::string& message);

}  // namespace primekv::cli
