#pragma once

// simverbs counters: the port counters of a running fabric.

#include <CLI/CLI.hpp>
#include <string>

CLI::App* AddCountersCommand(CLI::App& app, std::string* fabric);
int RunCounters(const std::string& fabric);
