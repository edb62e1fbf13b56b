// extern "C" verbs of devices and contexts: list, open/close, queries, sysfs
// and async events. Convert and forward; the semantics live in sim/src.

#include <infiniband/verbs.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <fcntl.h>

#include "abi/c_api.h"
#include "context.h"
#include "cq.h"
#include "device.h"
#include "device_list.h"
#include "event_element.h"
#include "query.h"

#undef ibv_get_device_list
#undef ibv_query_port

using namespace simverbs;

SIMVERBS_EXPORT_1_1(ibv_get_device_list) ibv_device** sv_ibv_get_device_list(int* num_devices) {
  return Guarded<OnThrow::kNullErrno>([&]() -> ibv_device** {
    const auto& devices = DeviceList::Get().devices();
    auto** list = static_cast<ibv_device**>(std::calloc(devices.size() + 1, sizeof(ibv_device*)));
    if (!list) {
      errno = ENOMEM;
      return nullptr;
    }
    for (size_t i = 0; i < devices.size(); ++i) list[i] = devices[i]->ibv();
    if (num_devices) *num_devices = static_cast<int>(devices.size());
    return list;
  });
}

SIMVERBS_EXPORT_1_1(ibv_free_device_list) void sv_ibv_free_device_list(ibv_device** list) { std::free(list); }

SIMVERBS_EXPORT_1_1(ibv_get_device_name) const char* sv_ibv_get_device_name(ibv_device* device) {
  Device* d = Device::From(device);
  if (!d) {
    errno = EINVAL;
    return nullptr;
  }
  return d->ibv()->name;
}

SIMVERBS_EXPORT_1_1(ibv_get_device_guid) __be64 sv_ibv_get_device_guid(ibv_device* device) {
  Device* d = Device::From(device);
  if (!d) {
    errno = EINVAL;
    return 0;
  }
  return d->guid_be();
}

SIMVERBS_EXPORT int ibv_get_device_index(ibv_device* device) {
  Device* d = Device::From(device);
  return d ? d->index() : -1;
}

SIMVERBS_EXPORT_1_1(ibv_open_device) ibv_context* sv_ibv_open_device(ibv_device* device) {
  return Guarded<OnThrow::kNullErrno>([&]() -> ibv_context* {
    Device* d = Device::From(device);
    if (!d) {
      errno = ENODEV;
      return nullptr;
    }
    Result<Context*> r = Context::Open(d);
    Context* c = PointerOrErrno(r);
    return c ? c->ibv() : nullptr;
  });
}

SIMVERBS_EXPORT_1_1(ibv_close_device) int sv_ibv_close_device(ibv_context* context) {
  return Guarded<OnThrow::kMinusOneErrno>([&]() -> int {
    Context* c = Context::From(context);
    if (!c) return MinusOneOrZero(EINVAL);
    c->Close();
    return 0;
  });
}

SIMVERBS_EXPORT ibv_context* ibv_import_device(int /*cmd_fd*/) {
  // Sharing a context through its command fd needs the kernel; not simulated.
  errno = EOPNOTSUPP;
  return nullptr;
}

SIMVERBS_EXPORT_1_1(ibv_query_device) int sv_ibv_query_device(ibv_context* context, ibv_device_attr* device_attr) {
  return Guarded<OnThrow::kErrnoSet>([&]() -> int {
    return QueryDeviceOp(context, device_attr);
  });
}

SIMVERBS_EXPORT_1_1(ibv_query_port) int sv_ibv_query_port(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* port_attr) {
  return Guarded<OnThrow::kErrnoSet>([&]() -> int {
    return QueryPortCompatOp(context, port_num, port_attr);
  });
}

SIMVERBS_EXPORT_1_1(ibv_query_gid) int sv_ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  return Guarded<OnThrow::kMinusOneErrno>([&]() -> int {
    return MinusOneOrZero(QueryGid(context, port_num, index, gid));
  });
}

SIMVERBS_EXPORT int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                                      ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  return Guarded<OnThrow::kErrnoSet>([&]() -> int {
    return QueryGidEx(context, port_num, gid_index, entry, flags, entry_size);
  });
}

SIMVERBS_EXPORT ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                                             uint32_t flags, size_t entry_size) {
  return Guarded<OnThrow::kNegativeErrno>([&]() -> ssize_t {
    return QueryGidTable(context, entries, max_entries, flags, entry_size);
  });
}

SIMVERBS_EXPORT_1_1(ibv_query_pkey) int sv_ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  return Guarded<OnThrow::kMinusOneErrno>([&]() -> int {
    return MinusOneOrZero(QueryPkey(context, port_num, index, pkey));
  });
}

SIMVERBS_EXPORT int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
  return Guarded<OnThrow::kMinusOneErrno>([&]() -> int {
    const int r = GetPkeyIndex(context, port_num, pkey);
    return r >= 0 ? r : MinusOneOrZero(-r);
  });
}

// rdma-core private, but ibv_devinfo and pyverbs call it.
SIMVERBS_EXPORT int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index, int* type) {
  return Guarded<OnThrow::kMinusOneErrno>([&]() -> int {
    return MinusOneOrZero(QueryGidType(context, port_num, index, type));
  });
}

// ---- sysfs: simulated devices answer from the profile; other paths are read
// from the real file system, as rdma-core does.

SIMVERBS_EXPORT const char* ibv_get_sysfs_path(void) {
  const char* env = std::getenv("SYSFS_PATH");
  return env && *env ? env : "/sys";
}

namespace {

// The `len` bytes read into buf (of `size`) as rdma-core's ibv_read_sysfs_file
// leaves them: a trailing newline becomes the terminator; text that fills the
// buffer without one fails (-1: it would be cut to be terminated).
int TerminateRead(char* buf, size_t len, size_t size) {
  if (len > 0 && buf[len - 1] == '\n') {
    buf[--len] = '\0';
  } else if (len < size) {
    buf[len] = '\0';
  } else {
    return -1;
  }
  return static_cast<int>(len);
}

}  // namespace

SIMVERBS_EXPORT int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  return Guarded<OnThrow::kMinusOneErrno>([&]() -> int {
    char scratch[256];
    if (const char* value = SysfsValue(dir, file, scratch, sizeof scratch)) {
      const size_t len = std::min(std::strlen(value), size);
      std::memcpy(buf, value, len);
      return TerminateRead(buf, len, size);
    }
    char path[512];
    std::snprintf(path, sizeof path, "%s/%s", dir, file);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    const ssize_t len = read(fd, buf, size);
    close(fd);
    return len < 0 ? -1 : TerminateRead(buf, static_cast<size_t>(len), size);
  });
}

// ---- async events

SIMVERBS_EXPORT_1_1(ibv_get_async_event) int sv_ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  return GuardedCancellable<OnThrow::kMinusOneErrno>([&]() -> int {
    Context* c = Context::From(context);
    if (!c || !event) return MinusOneOrZero(EINVAL);
    QueuedEvent ev;
    if (int err = c->async_events().Pop(&ev)) return MinusOneOrZero(err);
    std::memset(event, 0, sizeof *event);
    event->event_type = ev.type;
    switch (ElementOf(ev.type)) {
      case EventElement::kCq: event->element.cq = static_cast<ibv_cq*>(ev.element); break;
      case EventElement::kQp: event->element.qp = static_cast<ibv_qp*>(ev.element); break;
      case EventElement::kSrq: event->element.srq = static_cast<ibv_srq*>(ev.element); break;
      case EventElement::kWq: event->element.wq = static_cast<ibv_wq*>(ev.element); break;
      default: event->element.port_num = ev.port_num; break;
    }
    return 0;
  });
}

// As libibverbs: count the ack on the object's public counter and wake a
// destroy that may be waiting for it. Port and device events need no ack.
SIMVERBS_EXPORT_1_1(ibv_ack_async_event) void sv_ibv_ack_async_event(ibv_async_event* event) {
  if (!event) return;
  auto ack = [](pthread_mutex_t* mu, pthread_cond_t* cond, uint32_t* counter) {
    pthread_mutex_lock(mu);
    ++*counter;
    pthread_cond_signal(cond);
    pthread_mutex_unlock(mu);
  };
  switch (ElementOf(event->event_type)) {
    case EventElement::kCq: {
      ibv_cq* cq = event->element.cq;
      ack(&cq->mutex, &cq->cond, &cq->async_events_completed);
      break;
    }
    case EventElement::kQp: {
      ibv_qp* qp = event->element.qp;
      ack(&qp->mutex, &qp->cond, &qp->events_completed);
      break;
    }
    case EventElement::kSrq: {
      ibv_srq* srq = event->element.srq;
      ack(&srq->mutex, &srq->cond, &srq->events_completed);
      break;
    }
    case EventElement::kWq: {
      ibv_wq* wq = event->element.wq;
      ack(&wq->mutex, &wq->cond, &wq->events_completed);
      break;
    }
    default:
      break;
  }
}
