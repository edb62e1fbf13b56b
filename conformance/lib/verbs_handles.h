#pragma once

#include <infiniband/verbs.h>

#include <memory>

namespace conformance {

// Owning handles for verbs objects: unique_ptr with the matching destroy verb,
// so an early ASSERT never leaks an object into the next test. The destroy
// result is ignored here; a test that checks it calls release() and destroys
// the object itself.
template <typename T>
struct VerbsDeleter;

template <>
struct VerbsDeleter<ibv_context> {
  void operator()(ibv_context* context) const { ibv_close_device(context); }
};

template <>
struct VerbsDeleter<ibv_pd> {
  void operator()(ibv_pd* pd) const { ibv_dealloc_pd(pd); }
};

template <>
struct VerbsDeleter<ibv_mr> {
  void operator()(ibv_mr* mr) const { ibv_dereg_mr(mr); }
};

template <>
struct VerbsDeleter<ibv_cq> {
  void operator()(ibv_cq* cq) const { ibv_destroy_cq(cq); }
};

template <>
struct VerbsDeleter<ibv_cq_ex> {
  void operator()(ibv_cq_ex* cq) const { ibv_destroy_cq(ibv_cq_ex_to_cq(cq)); }
};

template <>
struct VerbsDeleter<ibv_comp_channel> {
  void operator()(ibv_comp_channel* channel) const { ibv_destroy_comp_channel(channel); }
};

template <>
struct VerbsDeleter<ibv_qp> {
  void operator()(ibv_qp* qp) const { ibv_destroy_qp(qp); }
};

template <>
struct VerbsDeleter<ibv_srq> {
  void operator()(ibv_srq* srq) const { ibv_destroy_srq(srq); }
};

template <>
struct VerbsDeleter<ibv_ah> {
  void operator()(ibv_ah* ah) const { ibv_destroy_ah(ah); }
};

template <>
struct VerbsDeleter<ibv_xrcd> {
  void operator()(ibv_xrcd* xrcd) const { ibv_close_xrcd(xrcd); }
};

template <typename T>
using VerbsPtr = std::unique_ptr<T, VerbsDeleter<T>>;

using ContextPtr = VerbsPtr<ibv_context>;
using PdPtr = VerbsPtr<ibv_pd>;
using MrPtr = VerbsPtr<ibv_mr>;
using CqPtr = VerbsPtr<ibv_cq>;
using CqExPtr = VerbsPtr<ibv_cq_ex>;
using ChannelPtr = VerbsPtr<ibv_comp_channel>;
using QpPtr = VerbsPtr<ibv_qp>;
using SrqPtr = VerbsPtr<ibv_srq>;
using AhPtr = VerbsPtr<ibv_ah>;
using XrcdPtr = VerbsPtr<ibv_xrcd>;

// The array from ibv_get_device_list.
struct DeviceListDeleter {
  void operator()(ibv_device** list) const { ibv_free_device_list(list); }
};
using DeviceListPtr = std::unique_ptr<ibv_device*[], DeviceListDeleter>;

}  // namespace conformance
