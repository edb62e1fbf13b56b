#include "cm_id.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "port_addresses.h"

namespace simverbs::rdmacm {

CmId::CmId(EventChannel* channel, void* context, rdma_port_space ps, ibv_qp_type qp_type, bool sync_mode)
    : sync(sync_mode) {
  pub_.channel = reinterpret_cast<rdma_event_channel*>(channel);
  pub_.context = context;
  pub_.ps = ps;
  pub_.qp_type = qp_type;
}

void CmId::AttachPort(const LocalPort* p) {
  port = p;
  pub_.verbs = p->verbs;
  pub_.port_num = p->port;
  if (!pub_.pd) pub_.pd = PortAddresses::Get().DefaultPd(p->verbs);
  rdma_ib_addr& ib = pub_.route.addr.addr.ibaddr;
  ib.sgid = p->ConnectionGid();
  ib.pkey = 0xffff;
}

CmMessage CmId::Message(CmMessageType type) const {
  CmMessage message;
  CmMessage* m = &message;
  m->type = type;
  m->qpn = pub_.qp ? pub_.qp->qp_num : 0;
  m->psn = psn;
  m->lid = port ? port->lid : 0;
  m->mtu = static_cast<uint8_t>(port ? port->active_mtu : IBV_MTU_1024);
  std::memcpy(m->gid, pub_.route.addr.addr.ibaddr.sgid.raw, 16);
  m->port_space = static_cast<uint16_t>(pub_.ps);
  std::memcpy(&m->src, &pub_.route.addr.src_storage, sizeof m->src);
  std::memcpy(&m->dst, &pub_.route.addr.dst_storage, sizeof m->dst);
  return message;
}

int CmId::QpAttr(ibv_qp_state target, ibv_qp_attr* attr, int* mask) const {
  if (!port) return EINVAL;
  *attr = {};
  attr->qp_state = target;
  const bool ud = pub_.qp_type == IBV_QPT_UD;
  switch (target) {
    case IBV_QPS_INIT:
      attr->pkey_index = 0;
      attr->port_num = port->port;
      *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      if (ud) {
        attr->qkey = qkey;
        *mask |= IBV_QP_QKEY;
      } else {
        // The kernel CM grants remote write always and read/atomic with responder resources.
        attr->qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
        if (responder_resources) attr->qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        *mask |= IBV_QP_ACCESS_FLAGS;
      }
      return 0;
    case IBV_QPS_RTR:
      *mask = IBV_QP_STATE;
      if (ud) return 0;
      if (!have_remote) return EINVAL;
      attr->path_mtu = static_cast<ibv_mtu>(std::min<int>(port->active_mtu, remote.mtu ? int{remote.mtu} : int{IBV_MTU_1024}));
      attr->dest_qp_num = remote.qpn;
      attr->rq_psn = remote.psn;
      attr->max_dest_rd_atomic = responder_resources;
      attr->min_rnr_timer = 12;  // 0.64 ms
      attr->ah_attr = port->AhTo(remote.lid, remote.gid);
      // The responder resources are known now: read and atomic follow them.
      attr->qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
      if (responder_resources) attr->qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
      *mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
               IBV_QP_MIN_RNR_TIMER | IBV_QP_ACCESS_FLAGS;
      return 0;
    case IBV_QPS_RTS:
      *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      attr->sq_psn = ud ? 0 : psn;
      if (ud) return 0;
      // 4.096 us * 2^14 = 67 ms, as the kernel's default packet life time gives, unless
      // RDMA_OPTION_ID_ACK_TIMEOUT set one.
      attr->timeout = ack_timeout >= 0 ? static_cast<uint8_t>(ack_timeout) : 14;
      attr->retry_cnt = retry_count;
      attr->rnr_retry = rnr_retry_count;
      attr->max_rd_atomic = initiator_depth;
      *mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      return 0;
    case IBV_QPS_ERR:
    case IBV_QPS_RESET:
    case IBV_QPS_SQD:
      *mask = IBV_QP_STATE;
      return 0;
    default:
      return EINVAL;
  }
}

int CmId::ModifyQp(ibv_qp_state target) const {
  if (!pub_.qp) return 0;
  ibv_qp_attr attr;
  int mask = 0;
  if (int err = QpAttr(target, &attr, &mask)) return err;
  return ibv_modify_qp(pub_.qp, &attr, mask);
}

void CmId::DetachGroups() {
  for (MulticastGroup& g : groups) {
    if (g.attached && pub_.qp) ibv_detach_mcast(pub_.qp, &g.mgid, g.mlid);
    g.attached = false;
  }
}

}  // namespace simverbs::rdmacm
