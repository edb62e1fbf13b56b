#pragma once

#include <string>
#include <vector>

#include "profile.h"

namespace simverbs {

// `simverbs run --sysfs`: gives this process, and the program it then execs, a
// private mount namespace in which /sys/class/infiniband lists the simulated
// devices, each with the loopback interface as its net device
// (/sys/class/infiniband/<dev>/device/net/lo). That is where pyverbs and
// similar tools look for a device's IP address (then `ip addr show lo` gives
// 127.0.0.1, which rdma_cm resolves to the first simulated port), and
// /dev/infiniband/uverbsN, the device nodes (a character device, /dev/null)
// that some programs check for before they use a device (UCX), with each
// port's GID attributes (ports/<n>/gid_attrs/types/<i>, and on Ethernet
// ports ndevs/<i>: lo), which UCX reads to pick a RoCE GID. Nothing
// outside the namespace changes. Without root it first enters a user namespace
// that maps the caller's uid and gid to themselves. Returns "" or what went
// wrong and how to fix it.
std::string EnterSysfsNamespace(const std::vector<DeviceProfile>& devices);

}  // namespace simverbs
