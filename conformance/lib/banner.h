#pragma once

#include <infiniband/verbs.h>

#include <string>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/backend_selection.h"
#include "conformance/lib/options.h"

namespace conformance {

// Prints what this run tests: backend, device, node GUID, fw_ver, link layer,
// the backend file and, for rxe, the kernel. Returns false (after printing
// why) when the device or port cannot be queried.
bool PrintBanner(ibv_context* context, const Options& options, const BackendSelection& selection,
                 const BackendProfile& backend);

}  // namespace conformance
