// The rdma_cm part of the control API (sim/include/simverbs/simverbs_rdmacm.h),
// exported in SIMVERBS_1 next to librdmacm's own functions. libibverbs calls
// these too, for `simverbs inject`, fault plans and DEVICE_FATAL
// (sim/src/fault/cm_link.h).

#include "simverbs/simverbs_rdmacm.h"

#include <cerrno>
#include <mutex>

#include "cm_message.h"
#include "cm_service.h"

using simverbs::rdmacm::CmFaults;
using simverbs::rdmacm::CmMessageType;
using simverbs::rdmacm::CmService;

extern "C" {

__attribute__((visibility("default"))) int simverbs_cm_reject_requests(unsigned int count, int reason) {
  if (reason < 1 || reason > 255) return EINVAL;
  std::lock_guard<std::mutex> lock(CmService::Get().mu());
  CmService::Get().faults().ArmReject(count, static_cast<uint8_t>(reason));
  return 0;
}

__attribute__((visibility("default"))) int simverbs_cm_drop_messages(enum simverbs_cm_message message,
                                                                     unsigned int count) {
  const auto type = static_cast<CmMessageType>(message);
  if (message < SIMVERBS_CM_REQ || message > SIMVERBS_CM_SIDR_REQ || !CmFaults::Resent(type)) return EINVAL;
  std::lock_guard<std::mutex> lock(CmService::Get().mu());
  CmService::Get().faults().ArmDrop(type, count);
  return 0;
}

__attribute__((visibility("default"))) int simverbs_cm_raise_event(struct ibv_context* context, uint8_t port_num,
                                                                   enum rdma_cm_event_type type) {
  if (!context || !context->device) return -EINVAL;
  if (type != RDMA_CM_EVENT_ADDR_CHANGE && type != RDMA_CM_EVENT_DEVICE_REMOVAL) return -EINVAL;
  if (type == RDMA_CM_EVENT_ADDR_CHANGE && port_num == 0) return -EINVAL;
  try {
    std::lock_guard<std::mutex> lock(CmService::Get().mu());
    return CmService::Get().RaiseOnDevice(ibv_get_device_name(context->device), port_num, type);
  } catch (...) {
    return -ENOMEM;  // an event could not be allocated
  }
}

}  // extern "C"
