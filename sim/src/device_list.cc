#include "device_list.h"

#include <cstdio>
#include <cstdlib>

#include "trace/trace.h"

namespace simverbs {

DeviceList& DeviceList::Get() {
  // Intentionally leaked: devices must outlive every context, including ones
  // that programs close from their own atexit handlers.
  static DeviceList* list = new DeviceList();
  instance_.store(list, std::memory_order_release);
  return *list;
}

DeviceList::DeviceList() {
  const char* env = std::getenv("SIMVERBS_PROFILE");
  ProfileLoad load = LoadProfile(env ? env : "");
  if (!load.error.empty()) {
    load_error_ = load.error;
    std::fprintf(stderr, "simverbs: %s\n", load.error.c_str());
    return;
  }
  profile_ = std::move(load.profile);
  Trace::Get().Start(profile_.name);
  int index = 0;
  for (const auto& dev : profile_.devices) devices_.push_back(std::make_unique<Device>(dev, profile_.behaviour, index++));
}

Device* DeviceList::Find(const std::string& name) const {
  for (const auto& d : devices_) {
    if (d->name() == name) return d.get();
  }
  return nullptr;
}

}  // namespace simverbs
