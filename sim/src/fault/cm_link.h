#pragma once

// The simulator's librdmacm, reached from libibverbs: `simverbs inject`'s
// mailbox, fault plans and DEVICE_FATAL act on the connection manager of the
// process through the control API librdmacm exports (simverbs_rdmacm.h).
// The library is looked up among those the process has loaded (dlopen with
// RTLD_NOLOAD, so also when a Python extension loaded it RTLD_LOCAL); a
// process without rdma_cm has no CM to reach, and each call returns -ENOENT.

#include <infiniband/verbs.h>

#include <string>

namespace simverbs {

// The event numbers of rdma_cma.h's enum rdma_cm_event_type this side raises.
constexpr int kCmEventDeviceRemoval = 11;  // RDMA_CM_EVENT_DEVICE_REMOVAL
constexpr int kCmEventAddrChange = 14;     // RDMA_CM_EVENT_ADDR_CHANGE

class Device;

// simverbs_cm_raise_event on `device`: the ids reached, -EINVAL, or -ENOENT
// (also when no context of the device is open: then the CM has none there).
int CmRaiseEvent(Device* device, int port_num, int cm_event);
// simverbs_cm_reject_requests / simverbs_cm_drop_messages: 0 when armed, -errno otherwise.
int CmRejectRequests(unsigned count, int reason);
int CmDropMessages(int message, unsigned count);

// "REQ", "REP", "DREQ", "SIDR_REQ" (any case) → enum simverbs_cm_message. False otherwise.
bool ParseCmMessage(const std::string& name, int* message);
// The names ParseCmMessage takes, for messages to users.
constexpr const char* kCmMessageNames = "REQ, REP, DREQ, SIDR_REQ";

}  // namespace simverbs
