#pragma once

// Which fork() this process is: 0 in the process that loaded the library, one
// more in each child of fork() (a fork handler of its own, registered when the
// library loads). An object made before a fork is the parent's: its copy in
// the child is not the one the fabric means by its number (a QP number names
// the parent's QP, as on an HCA).

#include <cstdint>

namespace simverbs {

uint32_t ForkGeneration();

}  // namespace simverbs
