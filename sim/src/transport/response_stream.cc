#include "transport/response_stream.h"

#include <algorithm>

#include "transport/packet.h"

namespace simverbs {

bool CutResponse(const Packet& whole, Packet* out) {
  ResponseStream& s = *whole.stream;
  const uint64_t total = whole.dma_length;
  // A READ of no bytes is answered by one packet without payload.
  if (s.ended || (s.cut >= total && s.packets > 0)) {
    s.ended = true;
    return false;
  }
  const uint64_t chunk = std::min<uint64_t>(s.mtu, total - s.cut);
  const uint8_t* bytes = chunk ? s.locate(s, whole.remote_addr + s.cut, chunk) : nullptr;
  if (chunk && !bytes) {
    s.ended = true;
    return false;
  }
  // Every field of `whole` but its stream, set aside meanwhile (moves cost
  // no atomic operation; whole's payload is empty: the copy allocates nothing).
  std::shared_ptr<ResponseStream> stream = std::move(whole.stream);
  out->stream.reset();
  *out = whole;
  whole.stream = std::move(stream);
  out->payload.Borrow(bytes, chunk);
  out->psn = (whole.psn + s.packets) & 0xffffff;
  out->first = s.cut == 0;
  out->last = s.cut + chunk == total;
  s.cut += chunk;
  ++s.packets;
  return true;
}

}  // namespace simverbs
