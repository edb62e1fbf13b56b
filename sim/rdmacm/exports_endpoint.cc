// librdmacm's endpoint calls: rdma_getaddrinfo, rdma_create_ep / rdma_destroy_ep
// and the SRQ helpers (rdma_cma.h, rdma_verbs.h).

#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "api.h"
#include "cm_id.h"
#include "cm_service.h"
#include "port_addresses.h"

using simverbs::rdmacm::CmId;
using simverbs::rdmacm::CmService;
using simverbs::rdmacm::Fail;
using simverbs::rdmacm::Guarded;

namespace {

// One address of `node`/`service` (numeric, or a name the system resolves:
// localhost), as getaddrinfo gives it, into *addr. Returns getaddrinfo's
// answer: 0, or an EAI_* code (EAI_MEMORY when the copy finds no memory).
int Lookup(const char* node, const char* service, int family, unsigned rai_flags, sockaddr** addr,
           socklen_t* len) {
  addrinfo hints = {};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  // As librdmacm's ucma_convert_to_ai.
  if (rai_flags & RAI_PASSIVE) hints.ai_flags |= AI_PASSIVE;
  if (rai_flags & RAI_NUMERICHOST) hints.ai_flags |= AI_NUMERICHOST;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(node, service, &hints, &found);
  if (rc != 0) return rc;
  if (!found) return EAI_NONAME;
  *addr = static_cast<sockaddr*>(std::calloc(1, found->ai_addrlen));
  if (*addr) {
    std::memcpy(*addr, found->ai_addr, found->ai_addrlen);
    *len = found->ai_addrlen;
  }
  freeaddrinfo(found);
  return *addr ? 0 : EAI_MEMORY;
}

// A copy of `len` bytes of `addr` that rdma_freeaddrinfo frees; nullptr: no memory.
sockaddr* CopyAddress(const sockaddr* addr, socklen_t len) {
  auto* copy = static_cast<sockaddr*>(std::malloc(len));
  if (copy) std::memcpy(copy, addr, len);
  return copy;
}

}  // namespace

extern "C" {

int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints, rdma_addrinfo** res) {
  return Guarded([&] {
    // As librdmacm: with neither node nor service the hints alone describe the result.
    if (!res || (!node && !service && !hints)) return Fail(EINVAL);
    auto* ai = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
    if (!ai) return Fail(ENOMEM);
    const auto fail = [&](int err) {
      rdma_freeaddrinfo(ai);
      return Fail(err);
    };
    if (node || service) {
      ai->ai_flags = hints ? hints->ai_flags : 0;
      // The port space the hints give, else the QP type's (a UD QP: RDMA_PS_UDP, as
      // librdmacm's rdma_getaddrinfo ends up with for such hints).
      const bool ud = hints && hints->ai_qp_type == IBV_QPT_UD;
      ai->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : ud ? RDMA_PS_UDP : RDMA_PS_TCP;
      ai->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type
                                                   : (ai->ai_port_space == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC);
      const int family = hints && hints->ai_family ? hints->ai_family : AF_UNSPEC;
      const bool passive = ai->ai_flags & RAI_PASSIVE;
      sockaddr* addr = nullptr;
      // rdma_getaddrinfo(3) RETURN VALUE: getaddrinfo's EAI_* code, as librdmacm returns it.
      if (const int rc = Lookup(node, service, family, static_cast<unsigned>(ai->ai_flags), &addr,
                                passive ? &ai->ai_src_len : &ai->ai_dst_len)) {
        rdma_freeaddrinfo(ai);
        return rc;
      }
      (passive ? ai->ai_src_addr : ai->ai_dst_addr) = addr;
      ai->ai_family = addr->sa_family;
    } else {
      // The hints as they are, their destination too (rdma_getaddrinfo(3):
      // resolved "based on the hints.ai_src_addr, hints.ai_dst_addr").
      ai->ai_flags = hints->ai_flags;
      ai->ai_family = hints->ai_family;
      ai->ai_qp_type = hints->ai_qp_type;
      ai->ai_port_space = hints->ai_port_space;
      if (hints->ai_dst_addr && hints->ai_dst_len) {
        ai->ai_dst_addr = CopyAddress(hints->ai_dst_addr, hints->ai_dst_len);
        if (!ai->ai_dst_addr) return fail(ENOMEM);
        ai->ai_dst_len = hints->ai_dst_len;
      }
    }
    if (!ai->ai_src_addr && hints && hints->ai_src_addr && hints->ai_src_len) {
      ai->ai_src_addr = CopyAddress(hints->ai_src_addr, hints->ai_src_len);
      if (!ai->ai_src_addr) return fail(ENOMEM);
      ai->ai_src_len = hints->ai_src_len;
    }
    if (ai->ai_family == AF_UNSPEC && ai->ai_src_addr) ai->ai_family = ai->ai_src_addr->sa_family;
    *res = ai;
    return 0;
  });
}

void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res) {
    rdma_addrinfo* next = res->ai_next;
    std::free(res->ai_src_addr);
    std::free(res->ai_dst_addr);
    std::free(res->ai_src_canonname);
    std::free(res->ai_dst_canonname);
    std::free(res->ai_route);
    std::free(res->ai_connect);
    std::free(res);
    res = next;
  }
}

int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  return Guarded([&] {
    if (!id || !res) return Fail(EINVAL);
    rdma_cm_id* cm_id = nullptr;
    if (rdma_create_id(nullptr, &cm_id, nullptr, static_cast<rdma_port_space>(res->ai_port_space)) != 0) return -1;
    auto fail = [&] {
      const int err = errno;
      rdma_destroy_id(cm_id);
      return Fail(err);
    };
    // The QP's type is the address's (librdmacm does the same).
    if (qp_init_attr) qp_init_attr->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
    if (res->ai_flags & RAI_PASSIVE) {
      if (!res->ai_src_addr || rdma_bind_addr(cm_id, res->ai_src_addr) != 0) return fail();
      if (qp_init_attr) {
        // Each request rdma_get_request returns gets a QP made like this.
        auto* attr = new ibv_qp_init_attr_ex();
        std::memcpy(attr, qp_init_attr, sizeof *qp_init_attr);
        attr->comp_mask = IBV_QP_INIT_ATTR_PD;
        attr->pd = pd;
        CmId::From(cm_id)->ep_qp_attr = attr;
      }
    } else {
      if (rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000) != 0) return fail();
      if (rdma_resolve_route(cm_id, 2000) != 0) return fail();
      if (qp_init_attr && rdma_create_qp(cm_id, pd, qp_init_attr) != 0) return fail();
    }
    *id = cm_id;
    return 0;
  });
}

void rdma_destroy_ep(rdma_cm_id* id) {
  if (!id) return;
  if (id->qp) rdma_destroy_qp(id);
  if (id->srq) rdma_destroy_srq(id);
  rdma_destroy_id(id);
}

int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr) {
  return Guarded([&] {
    if (!id || !attr || !id->verbs) return Fail(EINVAL);
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
      attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
      attr->pd = id->pd;
    }
    ibv_srq* srq = ibv_create_srq_ex(id->verbs, attr);
    if (!srq) return -1;
    id->srq = srq;
    return 0;
  });
}

int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
  return Guarded([&] {
    if (!id || !attr) return Fail(EINVAL);
    ibv_srq_init_attr_ex ex = {};
    ex.srq_context = attr->srq_context;
    ex.attr = attr->attr;
    ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
    ex.srq_type = IBV_SRQT_BASIC;
    ex.pd = pd ? pd : id->pd;
    if (rdma_create_srq_ex(id, &ex) != 0) return -1;
    attr->attr = ex.attr;
    return 0;
  });
}

void rdma_destroy_srq(rdma_cm_id* id) {
  if (!id || !id->srq) return;
  ibv_destroy_srq(id->srq);
  id->srq = nullptr;
}

}  // extern "C"
