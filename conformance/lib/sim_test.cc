#include "conformance/lib/sim_test.h"

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/skip_if.h"

namespace conformance {

void SimTest::SetUp() {
  SKIP_IF(!Sim()) << "(simverbs_version does not resolve: the backend is '" << Backend().name()
                  << "', not the simulator, so its control API is not there)";
  VerbsTest::SetUp();
}

}  // namespace conformance
