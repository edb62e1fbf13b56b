#pragma once

// A shared receive queue. Holds posted receive WQEs for the QPs attached to
// it; srq_limit arms a one-shot IBV_EVENT_SRQ_LIMIT_REACHED.
//
// An XRC SRQ (ibv_create_srq_ex with IBV_SRQT_XRC) belongs to an XRC domain
// and completes into its own CQ; XRC target QPs of the domain deliver into
// it by its number (ibv_get_srq_num). The number comes from the device's QP
// number space, which the fabric keeps unique across processes.

#include <infiniband/verbs.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "affiliated_events.h"
#include "handle.h"
#include "result.h"
#include "ring_queue.h"

namespace simverbs {

class Context;
class Cq;
class Device;
class Pd;
class Xrcd;

class Srq {
 public:
  static constexpr uint64_t kMagic = 0x53494d5352510001;  // "SIMSRQ"

  static Result<Srq*> Create(Pd* pd, const ibv_srq_init_attr& attr);
  static Result<Srq*> CreateEx(Context* ctx, const ibv_srq_init_attr_ex& attr);
  int Destroy();  // EBUSY while QPs use it; otherwise waits for acks
  int Modify(const ibv_srq_attr& attr, int mask);
  int Query(ibv_srq_attr* attr) const;
  int PostRecv(ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

  static Srq* From(const ibv_srq* srq) { return Handle<ibv_srq, Srq>::From(srq); }
  ibv_srq* ibv() { return &handle_.pub; }
  Context* context() const { return ctx_; }
  Pd* pd() const { return pd_; }
  Cq* cq() const { return cq_; }        // XRC only
  Xrcd* xrcd() const { return xrcd_; }  // XRC only
  bool is_xrc() const { return xrcd_ != nullptr; }
  uint32_t srq_num() const { return srq_num_; }

  // The XRC SRQ with number `srq_num` on `device` in this process, or nullptr.
  // Requires: engine lock.
  static Srq* FindXrcLocked(const Device* device, uint32_t srq_num);
  // `ctx` was closed with XRC SRQs alive: target QPs no longer deliver into
  // them (their memory is left to the program). Requires: engine lock.
  static void OrphanXrcLocked(const Context* ctx);

  void RaiseAsync(ibv_event_type type);
  // Requires: mu_ held.
  void RaiseAsyncLocked(ibv_event_type type);
  void AddUser() { users_.fetch_add(1); }
  void RemoveUser() { users_.fetch_sub(1); }

  static int PostRecvOp(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
  static ibv_srq* CreateExOp(ibv_context* ctx, ibv_srq_init_attr_ex* attr);
  static int GetSrqNumOp(ibv_srq* srq, uint32_t* srq_num);

  // A posted receive: what the transport needs to deliver into it.
  struct Wqe {
    uint64_t wr_id;
    std::vector<ibv_sge> sges;
  };
  // Takes the next receive for a QP (FIFO). Fires the armed limit event when
  // fewer than srq_limit WQEs remain, then disarms. Requires: engine lock.
  bool TakeLocked(Wqe* out);
  // A WQE taken for a message that was then dropped (UC) goes back to the
  // head, unconsumed, without memory: PostRecv keeps room for one per QP
  // that uses the SRQ (users_). XRC target QPs are not counted: only an RC
  // or UC responder gives a receive back. Requires: engine lock.
  void PutBackLocked(Wqe wqe);

  // A consumed WQE whose completion is not polled yet keeps its slot (the
  // profile's receive_queue_release, poll; not for an XRC SRQ): HoldSlot when
  // the completion is made, FreeSlots when it is polled, lost or forgotten.
  void HoldSlot() { held_.fetch_add(1, std::memory_order_relaxed); }
  void FreeSlots(uint32_t count) { held_.fetch_sub(count, std::memory_order_release); }

 private:
  // The entries a queue asked for `entries` holds on this device (srq_size).
  static uint32_t ActualSize(const Device* device, uint32_t entries);
  // Create, past its fault point (CreateEx hits it once for an XRC SRQ).
  static Result<Srq*> CreateChecked(Pd* pd, const ibv_srq_init_attr& attr);
  Srq(Pd* pd, const ibv_srq_init_attr& attr);
  ~Srq();
  // XRC: no target QP finds it any more; its number is free again. Requires: engine lock.
  void LeaveXrcDirectoryLocked();

  Handle<ibv_srq, Srq> handle_;
  Context* ctx_;
  Pd* pd_;
  Cq* cq_ = nullptr;
  Xrcd* xrcd_ = nullptr;
  uint32_t srq_num_ = 0;
  std::atomic<int> users_{0};
  AffiliatedEvents events_;

  mutable std::mutex mu_;
  uint32_t max_wr_;
  uint32_t max_sge_;
  uint32_t limit_ = 0;  // 0 = not armed
  RingQueue<Wqe> wqes_;
  std::atomic<uint32_t> held_{0};  // HoldSlot
  bool destroying_ = false;
};

}  // namespace simverbs
