#pragma once

#include "conformance/lib/verbs_test.h"

namespace conformance {

// Fixture for tests that drive the simulator through its control API: they
// are skipped, with the reason, on any other backend.
class SimTest : public VerbsTest {
 protected:
  void SetUp() override;
};

}  // namespace conformance
