// Subcommands of the `primekv` binary: each registers its flags and a run callback.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace primekv::cli {

// Each Add* registers one subcommand on `app`; `run` receives the callback that returns the
// process exit code once the command line has parsed.
using Runner = std::function<int()>;
using AddCommand = void(CLI::App& app, Runner& run);
AddCommand AddInspect, AddGenerate, AddMakeModel, AddLogits, AddConvert, AddListPresses,
    AddPressScores, AddFidelity, AddEval, AddTokenize, AddServe, AddBench, AddCalibrate;

// Prints "primekv: <message>" to stderr and returns the exit code for errors.
int Fail(const std::string& message);
// The same for a usage error (a bad flag or value): exit code 2.
int UsageError(const std::string& message);

}  // namespace primekv::cli
