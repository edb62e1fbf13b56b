#pragma once

// XRC between processes. An XRC target QP and the XRC SRQ a request names
// may live in different processes that opened the same XRC domain file (the
// point of XRC: ibv_xsrq_pingpong's server answers each client through
// whichever client's target QP is free). The target QP keeps the transport
// (PSN checks, ACKs, NAKs, its RNR NAKs); it forwards each packet of such a
// send to the SRQ's owner (found by SRQ number in the fabric's QP number
// directory) as a kXrcForward packet, and waits for the kXrcResult: success
// (the target ACKs), no receive posted (RNR NAK), or an error (NAK, the
// target goes to ERR). The owner checks the SRQ's domain by the file's
// identity, takes the receive, scatters with the SRQ's PD and completes on
// the SRQ's CQ with the target QP's number.
//
// Only SEND and SEND with immediate cross processes; an RDMA operation on a
// target QP whose SRQ is in another process is an invalid request.

#include "transport/packet.h"

namespace simverbs {

class Srq;

// A kXrcForward (we own the SRQ) or kXrcResult (we own the target QP) packet.
// Requires: engine lock.
void XrcRemoteLocked(const Packet& pkt);

// The SRQ is being destroyed: a message into it in progress is dropped.
// Requires: engine lock.
void XrcForgetSrqLocked(const Srq* srq);

}  // namespace simverbs
