#pragma once

// `simverbs record`: writes a device profile (fixtures/FORMAT.md) of a device this machine has.
//
// The querying is done by simverbs-query-device, a separate program linked against the system
// libibverbs (this CLI links the simulator's internals, and one process cannot have both). This
// side makes the identity stable if asked, keeps what cannot be measured from the existing file
// (its "behaviour" and "description"), and checks the result with the simulator's own strict
// profile loader before it writes anything.

#include <string>

namespace simverbs {

struct RecordOptions {
  std::string device;      // empty: the first device
  std::string output;      // empty: stdout
  std::string name;        // the profile's name; empty: the existing file's, else the file's stem
  std::string stable_mac;  // non-empty: node GUID and link-local GIDs become this MAC's EUI-64
};

// The MAC that scripts/rxe-vm's rxe0 is recorded with (10.0.0.1 on a locally administered MAC).
inline constexpr const char* kDefaultStableMac = "02:00:0a:00:00:01";

// Returns the exit status; messages go to stderr.
int Record(const RecordOptions& options);

}  // namespace simverbs
