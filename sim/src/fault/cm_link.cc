#include "fault/cm_link.h"

#include <dlfcn.h>
#include <rdma/rdma_cma.h>

#include <cctype>
#include <cerrno>

#include "context.h"
#include "device.h"
#include "simverbs/simverbs_rdmacm.h"

namespace simverbs {
namespace {

static_assert(kCmEventDeviceRemoval == RDMA_CM_EVENT_DEVICE_REMOVAL && kCmEventAddrChange == RDMA_CM_EVENT_ADDR_CHANGE);

// Runs `call` with the function `name` of the loaded librdmacm, or returns -ENOENT.
template <typename Fn, typename Call>
int WithCmFunction(const char* name, Call call) {
  void* lib = dlopen("librdmacm.so.1", RTLD_NOLOAD | RTLD_LAZY);
  if (!lib) return -ENOENT;
  auto* fn = reinterpret_cast<Fn*>(dlsym(lib, name));
  const int result = fn ? call(fn) : -ENOENT;  // the system's librdmacm has no control API
  dlclose(lib);  // RTLD_NOLOAD took a reference
  return result;
}

// The C types of the control API, without rdma_cma.h (libibverbs does not depend on it).
using RaiseEventFn = int(ibv_context*, uint8_t, int);
using RejectFn = int(unsigned, int);
using DropFn = int(int, unsigned);

}  // namespace

int CmRaiseEvent(Device* device, int port_num, int cm_event) {
  // The control API names the device by a context of it; any open one will do.
  ibv_context* context = nullptr;
  device->ForEachContext([&](Context* ctx) { context = &ctx->vctx()->context; });
  if (!context) return -ENOENT;
  return WithCmFunction<RaiseEventFn>("simverbs_cm_raise_event", [&](RaiseEventFn* fn) {
    return fn(context, static_cast<uint8_t>(port_num), cm_event);
  });
}

int CmRejectRequests(unsigned count, int reason) {
  return WithCmFunction<RejectFn>("simverbs_cm_reject_requests",
                                  [&](RejectFn* fn) { return -fn(count, reason); });
}

int CmDropMessages(int message, unsigned count) {
  return WithCmFunction<DropFn>("simverbs_cm_drop_messages", [&](DropFn* fn) { return -fn(message, count); });
}

bool ParseCmMessage(const std::string& name, int* message) {
  std::string upper;
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper == "REQ") {
    *message = SIMVERBS_CM_REQ;
  } else if (upper == "REP") {
    *message = SIMVERBS_CM_REP;
  } else if (upper == "DREQ") {
    *message = SIMVERBS_CM_DREQ;
  } else if (upper == "SIDR_REQ") {
    *message = SIMVERBS_CM_SIDR_REQ;
  } else {
    return false;
  }
  return true;
}

}  // namespace simverbs
