#pragma once

// The process-wide set of simulated devices, built from the profile that
// SIMVERBS_PROFILE selects the first time a device is needed.

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "device.h"
#include "profile.h"

namespace simverbs {

class DeviceList {
 public:
  // The singleton. Loading the profile happens once; a broken profile is
  // reported on stderr (file and field) and leaves the list empty.
  static DeviceList& Get();
  // The list, or nullptr before anything asked for it (fork_locks.cc).
  static DeviceList* IfMade() { return instance_.load(std::memory_order_acquire); }

  const std::vector<std::unique_ptr<Device>>& devices() const { return devices_; }
  Device* Find(const std::string& name) const;
  const Profile& profile() const { return profile_; }
  const std::string& load_error() const { return load_error_; }

 private:
  DeviceList();
  static inline std::atomic<DeviceList*> instance_{nullptr};
  Profile profile_;
  std::string load_error_;
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace simverbs
