#pragma once

// Sizes of the fabric's shared tables (fabric/fabric.h).

namespace simverbs {

// Processes attached to one fabric at once (mpirun -np 1024 on one node).
constexpr int kMaxFabricProcesses = 1024;

}  // namespace simverbs
