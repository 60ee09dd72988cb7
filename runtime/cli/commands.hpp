// The `loom` subcommands. Each takes the arguments after its name and returns an exit code;
// errors are thrown as UsageError / ConfigError / RuntimeError and mapped to codes in main.
#pragma once

#include <string>
#include <vector>

namespace loom::cli {

using Args = std::vector<std::string>;

int version(const Args& args);
int plugins(const Args& args);
int config(const Args& args);
int train(const Args& args);
int data(const Args& args);
int launch(const Args& args);
int bench(const Args& args);
int compare(const Args& args);
int doctor(const Args& args);
int ckpt_cmd(const Args& args);
int schedule(const Args& args);
int model(const Args& args);
int generate(const Args& args);
int eval(const Args& args);
int plan_cmd(const Args& args);

// This process's command line, with argv[0] as /proc/self/exe, for re-launching it as ranks.
void set_invocation(int argc, char** argv);
std::vector<std::string> self_invocation();

// Help text of the top-level command.
std::string usage();

}  // namespace loom::cli
