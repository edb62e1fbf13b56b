#include "qp_state_table.h"

#include <initializer_list>

namespace simverbs {
namespace {

// Required and optional attribute masks of one transition for RC, UC, UD
// and the two XRC halves (XRC_SEND is the kernel's XRC_INI, XRC_RECV its XRC_TGT).
struct Masks {
  int req = 0;
  int opt = 0;
};
struct Transition {
  bool valid = false;
  Masks rc, uc, ud;
};
struct XrcMasks {
  Masks ini, tgt;
};

constexpr int kStates = IBV_QPS_ERR + 1;

// clang-format off
constexpr int kInitReqRcUc = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kInitReqUd   = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
constexpr int kRtrReqUc    = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
constexpr int kRtrReqRc    = kRtrReqUc | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kRtrOptRcUc  = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
constexpr int kRtsReqRc    = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                             IBV_QP_MAX_QP_RD_ATOMIC;
constexpr int kToRtsOptUd  = IBV_QP_CUR_STATE | IBV_QP_QKEY;
constexpr int kToRtsOptUc  = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE;
constexpr int kToRtsOptRc  = kToRtsOptUc | IBV_QP_MIN_RNR_TIMER;
constexpr int kSqdSqdOptRc = IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                             IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_ALT_PATH |
                             IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_MIN_RNR_TIMER |
                             IBV_QP_PATH_MIG_STATE;
constexpr int kSqdSqdOptUc = IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
                             IBV_QP_PATH_MIG_STATE;
constexpr int kRtsReqXrcTgt = IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
constexpr int kSqdSqdOptXrcIni = kSqdSqdOptRc & ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
constexpr int kSqdSqdOptXrcTgt = kSqdSqdOptRc & ~(IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
// clang-format on

struct Table {
  Transition t[kStates][kStates];
  XrcMasks x[kStates][kStates];  // valid where t is

  constexpr Table() : t(), x() {
    // Every state may go to RESET, and every state but RESET to ERR, with no
    // other attribute (the kernel's table has no RESET -> ERR either).
    for (int s = 0; s < kStates; ++s) {
      t[s][IBV_QPS_RESET].valid = true;
      if (s != IBV_QPS_RESET) t[s][IBV_QPS_ERR].valid = true;
    }
    t[IBV_QPS_RESET][IBV_QPS_INIT] = {true, {kInitReqRcUc, 0}, {kInitReqRcUc, 0}, {kInitReqUd, 0}};
    t[IBV_QPS_INIT][IBV_QPS_INIT] = {true, {0, kInitReqRcUc}, {0, kInitReqRcUc}, {0, kInitReqUd}};
    t[IBV_QPS_INIT][IBV_QPS_RTR] = {true,
                                    {kRtrReqRc, kRtrOptRcUc},
                                    {kRtrReqUc, kRtrOptRcUc},
                                    {0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY}};
    t[IBV_QPS_RTR][IBV_QPS_RTS] = {true,
                                   {kRtsReqRc, kToRtsOptRc},
                                   {IBV_QP_SQ_PSN, kToRtsOptUc},
                                   {IBV_QP_SQ_PSN, kToRtsOptUd}};
    t[IBV_QPS_RTS][IBV_QPS_RTS] = {true, {0, kToRtsOptRc}, {0, kToRtsOptUc}, {0, kToRtsOptUd}};
    t[IBV_QPS_RTS][IBV_QPS_SQD] = {true,
                                   {0, IBV_QP_EN_SQD_ASYNC_NOTIFY},
                                   {0, IBV_QP_EN_SQD_ASYNC_NOTIFY},
                                   {0, IBV_QP_EN_SQD_ASYNC_NOTIFY}};
    t[IBV_QPS_SQD][IBV_QPS_RTS] = {true, {0, kToRtsOptRc}, {0, kToRtsOptUc}, {0, kToRtsOptUd}};
    t[IBV_QPS_SQD][IBV_QPS_SQD] = {true,
                                   {0, kSqdSqdOptRc},
                                   {0, kSqdSqdOptUc},
                                   {0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY}};
    // XRC (the kernel's qp_state_table): the initiator is RC without the
    // responder's attributes, the target RC without the requester's.
    x[IBV_QPS_RESET][IBV_QPS_INIT].ini = x[IBV_QPS_RESET][IBV_QPS_INIT].tgt = {kInitReqRcUc, 0};
    x[IBV_QPS_INIT][IBV_QPS_INIT].ini = x[IBV_QPS_INIT][IBV_QPS_INIT].tgt = {0, kInitReqRcUc};
    x[IBV_QPS_INIT][IBV_QPS_RTR].ini = {kRtrReqUc, kRtrOptRcUc};
    x[IBV_QPS_INIT][IBV_QPS_RTR].tgt = {kRtrReqRc, kRtrOptRcUc};
    x[IBV_QPS_RTR][IBV_QPS_RTS].ini = {kRtsReqRc, kToRtsOptUc};
    x[IBV_QPS_RTR][IBV_QPS_RTS].tgt = {kRtsReqXrcTgt, kToRtsOptRc};
    for (ibv_qp_state from : {IBV_QPS_RTS, IBV_QPS_SQD}) {
      x[from][IBV_QPS_RTS].ini = {0, kToRtsOptUc};
      x[from][IBV_QPS_RTS].tgt = {0, kToRtsOptRc};
    }
    x[IBV_QPS_RTS][IBV_QPS_SQD].ini = x[IBV_QPS_RTS][IBV_QPS_SQD].tgt = {0, IBV_QP_EN_SQD_ASYNC_NOTIFY};
    x[IBV_QPS_SQD][IBV_QPS_SQD].ini = {0, kSqdSqdOptXrcIni};
    x[IBV_QPS_SQD][IBV_QPS_SQD].tgt = {0, kSqdSqdOptXrcTgt};
    // SQE exists only for UC and UD (RC send errors go straight to ERR).
    t[IBV_QPS_SQE][IBV_QPS_RTS] = {true,
                                   {},
                                   {0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS},
                                   {0, IBV_QP_CUR_STATE | IBV_QP_QKEY}};
  }
};

constexpr Table kTable;

}  // namespace

bool QpTransitionIsValid(ibv_qp_state cur, ibv_qp_state next, ibv_qp_type type, int mask) {
  if (cur < 0 || cur >= kStates || next < 0 || next >= kStates) return false;
  const Transition& tr = kTable.t[cur][next];
  if (!tr.valid) return false;
  if (cur == IBV_QPS_SQE && (type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV)) {
    return false;
  }
  // The current state may only be asserted from RTR, RTS, SQD or SQE.
  if ((mask & IBV_QP_CUR_STATE) && cur != IBV_QPS_RTR && cur != IBV_QPS_RTS && cur != IBV_QPS_SQD &&
      cur != IBV_QPS_SQE) {
    return false;
  }
  const Masks* m = nullptr;
  switch (type) {
    case IBV_QPT_RC: m = &tr.rc; break;
    case IBV_QPT_UC: m = &tr.uc; break;
    case IBV_QPT_UD: m = &tr.ud; break;
    case IBV_QPT_XRC_SEND: m = &kTable.x[cur][next].ini; break;
    case IBV_QPT_XRC_RECV: m = &kTable.x[cur][next].tgt; break;
    default: return false;
  }
  if ((mask & m->req) != m->req) return false;
  if (mask & ~(m->req | m->opt | IBV_QP_STATE)) return false;
  return true;
}

}  // namespace simverbs
