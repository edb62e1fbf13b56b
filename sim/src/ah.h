#pragma once

// An address handle: where a UD work request sends its datagram.

#include <infiniband/verbs.h>

#include "handle.h"
#include "result.h"
#include "wqe.h"

namespace simverbs {

class Context;
class Pd;

class Ah {
 public:
  static constexpr uint64_t kMagic = 0x53494d4148000001;  // "SIMAH"

  static Result<Ah*> Create(Pd* pd, const ibv_ah_attr& attr);
  int Destroy();

  static Ah* From(const ibv_ah* ah) { return Handle<ibv_ah, Ah>::From(ah); }
  ibv_ah* ibv() { return &handle_.pub; }
  Context* context() const { return ctx_; }
  const Pd* pd() const { return pd_; }
  const AddressVector& av() const { return av_; }

  // ibv_init_ah_from_wc: the address that answers the sender of a received UD
  // completion (and its GRH, when IBV_WC_GRH is set).
  static int InitFromWc(Context* ctx, uint8_t port_num, const ibv_wc& wc, const ibv_grh* grh, ibv_ah_attr* out);

 private:
  Ah(Pd* pd, const ibv_ah_attr& attr);
  ~Ah();

  Handle<ibv_ah, Ah> handle_;
  Context* ctx_;
  Pd* pd_;
  AddressVector av_;
};

}  // namespace simverbs
