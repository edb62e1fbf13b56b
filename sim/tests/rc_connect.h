#pragma once

// For the stand-alone checks that drive verbs themselves (no conformance
// library): an RC QP from RESET to RTS, connected to (remote_qpn, lid) on
// port 1, path MTU 1024, one READ or atomic in flight each way.

#include <infiniband/verbs.h>

#include <cstdint>

namespace simverbs {

// What differs between the checks: the QP's remote access and its transport
// timers (ibv_modify_qp(3): timeout, retry_cnt, rnr_retry).
struct RcConnect {
  unsigned access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
};

inline bool ConnectRc(ibv_qp* qp, uint32_t remote_qpn, uint16_t lid, const RcConnect& how = {}) {
  ibv_qp_attr a = {};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = how.access;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return false;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.dlid = lid;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    return false;
  }
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = how.timeout;
  a.retry_cnt = how.retry_cnt;
  a.rnr_retry = how.rnr_retry;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC) == 0;
}

}  // namespace simverbs
