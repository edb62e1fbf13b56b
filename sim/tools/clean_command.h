#pragma once

// simverbs clean: removes what programs that died left in /dev/shm.

#include <CLI/CLI.hpp>

CLI::App* AddCleanCommand(CLI::App& app);
int RunClean();
