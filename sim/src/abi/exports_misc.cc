// extern "C" helpers with no device behind them: the *_str functions, rate
// conversions and fork support. Strings and tables are those of rdma-core 44.

#include <infiniband/verbs.h>

#include "abi/c_api.h"

SIMVERBS_EXPORT const char* ibv_node_type_str(ibv_node_type node_type) {
  static const char* const kStr[] = {
      nullptr, "InfiniBand channel adapter", "InfiniBand switch", "InfiniBand router", "iWARP NIC", "usNIC",
      "usNIC UDP", "unspecified"};
  if (node_type < IBV_NODE_CA || node_type > IBV_NODE_UNSPECIFIED) return "unknown";
  return kStr[node_type];
}

SIMVERBS_EXPORT const char* ibv_port_state_str(ibv_port_state port_state) {
  static const char* const kStr[] = {"no state change (NOP)", "down", "init", "armed", "active", "active defer"};
  if (port_state < IBV_PORT_NOP || port_state > IBV_PORT_ACTIVE_DEFER) return "unknown";
  return kStr[port_state];
}

SIMVERBS_EXPORT const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const kStr[] = {
      "CQ error",
      "local work queue catastrophic error",
      "invalid request local work queue error",
      "local access violation work queue error",
      "communication established",
      "send queue drained",
      "path migrated",
      "path migration request error",
      "local catastrophic error",
      "port active",
      "port error",
      "LID change",
      "P_Key change",
      "SM change",
      "SRQ catastrophic error",
      "SRQ limit reached",
      "last WQE reached",
      "client reregistration",
      "GID table change",
      "WQ fatal",
  };
  if (event < IBV_EVENT_CQ_ERR || event > IBV_EVENT_WQ_FATAL) return "unknown";
  return kStr[event];
}

SIMVERBS_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const kStr[] = {
      "success",
      "local length error",
      "local QP operation error",
      "local EE context operation error",
      "local protection error",
      "Work Request Flushed Error",
      "memory management operation error",
      "bad response error",
      "local access error",
      "remote invalid request error",
      "remote access error",
      "remote operation error",
      "transport retry counter exceeded",
      "RNR retry counter exceeded",
      "local RDD violation error",
      "remote invalid RD request",
      "aborted error",
      "invalid EE context number",
      "invalid EE context state",
      "fatal error",
      "response timeout error",
      "general error",
      "TM error",
      "TM software rendezvous",
  };
  if (status < IBV_WC_SUCCESS || status > IBV_WC_TM_RNDV_INCOMPLETE) return "unknown";
  return kStr[status];
}

namespace {

struct RateRow {
  ibv_rate rate;
  int mult;  // multiple of 2.5 Gbit/s; -1 for the rates rdma-core gives none
  int mbps;
};

constexpr RateRow kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},      {IBV_RATE_5_GBPS, 2, 5000},        {IBV_RATE_10_GBPS, 4, 10000},
    {IBV_RATE_20_GBPS, 8, 20000},      {IBV_RATE_30_GBPS, 12, 30000},     {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},     {IBV_RATE_80_GBPS, 32, 80000},     {IBV_RATE_120_GBPS, 48, 120000},
    {IBV_RATE_14_GBPS, -1, 14062},     {IBV_RATE_56_GBPS, -1, 56250},     {IBV_RATE_112_GBPS, -1, 112500},
    {IBV_RATE_168_GBPS, -1, 168750},   {IBV_RATE_25_GBPS, -1, 25781},     {IBV_RATE_100_GBPS, -1, 103125},
    {IBV_RATE_200_GBPS, -1, 206250},   {IBV_RATE_300_GBPS, -1, 309375},   {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},     {IBV_RATE_400_GBPS, 160, 425000},  {IBV_RATE_600_GBPS, 240, 637500},
    {IBV_RATE_800_GBPS, 320, 850000},  {IBV_RATE_1200_GBPS, 480, 1275000},
};

}  // namespace

SIMVERBS_EXPORT int ibv_rate_to_mult(ibv_rate rate) {
  for (const RateRow& r : kRates) {
    if (r.rate == rate) return r.mult;
  }
  return -1;
}

SIMVERBS_EXPORT ibv_rate mult_to_ibv_rate(int mult) {
  for (const RateRow& r : kRates) {
    if (r.mult == mult && mult > 0) return r.rate;
  }
  return IBV_RATE_MAX;
}

SIMVERBS_EXPORT int ibv_rate_to_mbps(ibv_rate rate) {
  for (const RateRow& r : kRates) {
    if (r.rate == rate) return r.mbps;
  }
  return -1;
}

SIMVERBS_EXPORT ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const RateRow& r : kRates) {
    if (r.mbps == mbps) return r.rate;
  }
  return IBV_RATE_MAX;
}

// Fork support: the simulator does not pin pages, so fork is always safe. A
// peer's one-copy WRITE goes into the registering process's own pages (by
// pid): a child of fork() keeps its private copy, as the kernel's copy-on-fork
// does for pinned pages: IBV_FORK_UNNEEDED holds.
SIMVERBS_EXPORT int ibv_fork_init(void) { return 0; }
SIMVERBS_EXPORT ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
SIMVERBS_EXPORT int ibv_dontfork_range(void*, size_t) { return 0; }
SIMVERBS_EXPORT int ibv_dofork_range(void*, size_t) { return 0; }

// Conversions of kernel ABI structs, exported for librdmacm. Nothing of the
// simulator produces kernel structs, so there is nothing to convert.
SIMVERBS_EXPORT void ibv_copy_qp_attr_from_kern(void*, void*) {}
SIMVERBS_EXPORT void ibv_copy_ah_attr_from_kern(void*, void*) {}
SIMVERBS_EXPORT void ibv_copy_path_rec_from_kern(void*, void*) {}
SIMVERBS_EXPORT void ibv_copy_path_rec_to_kern(void*, void*) {}
