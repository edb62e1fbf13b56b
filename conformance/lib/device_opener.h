#pragma once

#include <string>
#include <vector>

#include "conformance/lib/verbs_handles.h"

namespace conformance {

// The names ibv_get_device_list reports, in its order.
std::vector<std::string> DeviceNames();

// Opens the device called name, or the first device when name is empty. On
// failure returns nullptr and sets *error (naming the devices there are).
ContextPtr OpenDeviceByName(const std::string& name, std::string* error);

}  // namespace conformance
