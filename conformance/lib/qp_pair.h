#pragma once

// Shared set-up for the queue pair and data path tests: QPs with their CQs,
// the standard RESET -> INIT -> RTR -> RTS walk, a connected loopback pair on
// the fixture's device and port (real HCAs and rxe loop back too), registered
// buffers, and bounded waits for completions, QP states and async events.
//
// Everything that waits has a deadline: completions are polled (ibv_poll_cq
// never blocks), async events are read with O_NONBLOCK.

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "conformance/lib/event_acks.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_handles.h"
#include "conformance/lib/verbs_test.h"

namespace conformance {

// The Q_Key the UD helpers use (high bit clear: a real Q_Key, not "use the QP's").
inline constexpr uint32_t kTestQkey = 0x11111111;
// Remote access rights the RC helpers enable on a QP by default.
inline constexpr unsigned kRcRemoteAccess =
    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
// Every access right an MR for the data path tests needs.
inline constexpr unsigned kFullMrAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// "wr_id=7 status=... opcode=... byte_len=... qp_num=..." for failure messages.
std::string DescribeWc(const ibv_wc& wc);
std::string DescribeWcs(const std::vector<ibv_wc>& wcs);
const char* QpStateName(ibv_qp_state state);

// ---- completions ------------------------------------------------------------

// Polls cq until `count` completions have arrived (into *out, in CQ order) or
// timeout passes; fails on timeout or when ibv_poll_cq returns a negative value.
testing::AssertionResult PollCompletions(ibv_cq* cq, int count, std::vector<ibv_wc>* out,
                                         std::chrono::milliseconds timeout = kReturnWindow);
testing::AssertionResult PollOneCompletion(ibv_cq* cq, ibv_wc* wc, std::chrono::milliseconds timeout = kReturnWindow);

// Succeeds when cq yields no completion for the whole window (a bounded wait
// for a negative); an unexpected completion is described in the failure.
testing::AssertionResult NoCompletionWithin(ibv_cq* cq, std::chrono::milliseconds window = kBlockWindow);

// Calls `post` (a post that returns 0 or an errno) until it returns anything but ENOMEM or `window`
// passes, and returns what it returned last: for a queue slot the backend frees on its own, unpolled.
int PostWhileFull(const std::function<int()>& post, std::chrono::milliseconds window = kReturnWindow);

// Polls until ibv_poll_cq returns 0 or a negative value; *total is the number
// of completions taken, *last_rc what the last poll returned.
void DrainCq(ibv_cq* cq, std::vector<ibv_wc>* taken, int* last_rc);

// ---- QP state -----------------------------------------------------------------

testing::AssertionResult QueryQpState(ibv_qp* qp, ibv_qp_state* state);
// ibv_query_qp reports `state` within timeout (state changes caused by the
// wire, such as entering ERR after a NAK, may lag the completion on hardware).
testing::AssertionResult QpStateBecomes(ibv_qp* qp, ibv_qp_state state,
                                        std::chrono::milliseconds timeout = kReturnWindow);
// The state a send error moves a UC or UD QP to: SQE (IBA 10.3.1), or ERR where the backend answers
// "ERR" to UnreliableSendErrorState (rxe: every send error is fatal there).
ibv_qp_state UnreliableSendErrorState();
// ibv_query_qp reports SQD with sq_draining == 0 within timeout. A QP that
// has just entered SQD may still be draining (kernel rxe refuses to leave
// SQD, or to enter it again, until the drain has ended).
testing::AssertionResult SqDrainEnds(ibv_qp* qp, std::chrono::milliseconds timeout = kReturnWindow);

// ---- async events ---------------------------------------------------------

// The object an affiliated event names (element.qp / .cq / .srq / .wq), or
// nullptr for port and device events.
const void* EventElement(const ibv_async_event& event);
std::string DescribeEvent(const ibv_async_event& event);

// Reads async events of context until one of `type` for `element` arrives
// (handed to *acks, which acknowledges it later) or timeout passes. Other
// events are acknowledged at once and named in the failure message.
testing::AssertionResult WaitForAsyncEvent(ibv_context* context, ibv_event_type type, const void* element,
                                           EventAcks* acks, std::chrono::milliseconds timeout = kReturnWindow);

// Reads async events of context for the whole window and fails if one of
// `type` for `element` is among them; every event read is acknowledged.
testing::AssertionResult NoAsyncEventFor(ibv_context* context, ibv_event_type type, const void* element,
                                         std::chrono::milliseconds window = kBlockWindow);

// ---- memory ---------------------------------------------------------------------

// A registered buffer, 8-byte aligned (atomics need it).
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&&) = default;
  Buffer& operator=(Buffer&&) = default;

  // Allocates `size` bytes filled with `fill` and registers them in pd.
  testing::AssertionResult Register(ibv_pd* pd, size_t size, unsigned access = kFullMrAccess, uint8_t fill = 0);

  uint8_t* data() const { return reinterpret_cast<uint8_t*>(storage_.get()); }
  size_t size() const { return size_; }
  uint64_t addr(size_t offset = 0) const { return reinterpret_cast<uintptr_t>(data()) + offset; }
  uint32_t lkey() const { return mr_ ? mr_->lkey : 0; }
  uint32_t rkey() const { return mr_ ? mr_->rkey : 0; }
  ibv_mr* mr() const { return mr_.get(); }
  // One SGE over [offset, offset + length) of the buffer.
  ibv_sge Sge(size_t offset, uint32_t length) const;
  ibv_sge Sge() const { return Sge(0, static_cast<uint32_t>(size_)); }
  // Fills the buffer with a pattern that differs per byte and per seed.
  void FillPattern(uint8_t seed);
  std::vector<uint8_t> Bytes(size_t offset, size_t length) const;

 private:
  std::unique_ptr<uint64_t[]> storage_;
  size_t size_ = 0;
  MrPtr mr_;
};

// The pattern FillPattern(seed) writes, for comparing received bytes.
std::vector<uint8_t> Pattern(uint8_t seed, size_t length);

// ---- work requests -------------------------------------------------------------

ibv_send_wr SendWr(uint64_t wr_id, ibv_sge* sges, int num_sge, unsigned flags = IBV_SEND_SIGNALED,
                   ibv_wr_opcode opcode = IBV_WR_SEND);
ibv_send_wr RdmaWr(uint64_t wr_id, ibv_wr_opcode opcode, ibv_sge* sges, int num_sge, uint64_t remote_addr,
                   uint32_t rkey, unsigned flags = IBV_SEND_SIGNALED);
ibv_send_wr AtomicWr(uint64_t wr_id, ibv_wr_opcode opcode, ibv_sge* sge, uint64_t remote_addr, uint32_t rkey,
                     uint64_t compare_add, uint64_t swap);
ibv_send_wr UdSendWr(uint64_t wr_id, ibv_sge* sges, int num_sge, ibv_ah* ah, uint32_t remote_qpn,
                     uint32_t remote_qkey = kTestQkey, unsigned flags = IBV_SEND_SIGNALED);
// Posts one WR (its next pointer is cleared); returns ibv_post_send's value.
int PostOne(ibv_qp* qp, ibv_send_wr wr);
// Posts one receive of num_sge SGEs; returns ibv_post_recv's value.
int PostRecv(ibv_qp* qp, uint64_t wr_id, ibv_sge* sges, int num_sge);
int PostSrqRecv(ibv_srq* srq, uint64_t wr_id, ibv_sge* sges, int num_sge);

// ---- QP set-up ----------------------------------------------------------------

struct QpCaps {
  uint32_t max_send_wr = 16;
  uint32_t max_recv_wr = 16;
  uint32_t max_send_sge = 1;
  uint32_t max_recv_sge = 1;
  uint32_t max_inline_data = 0;
};

ibv_qp_init_attr MakeInitAttr(ibv_qp_type type, ibv_cq* send_cq, ibv_cq* recv_cq, const QpCaps& caps = {},
                              int sq_sig_all = 0, ibv_srq* srq = nullptr);

// One QP with its own send and receive CQs. Members are destroyed in reverse
// order: the QP first, then its CQs.
struct QpEnd {
  CqPtr send_cq;
  CqPtr recv_cq;
  QpPtr qp;

  ibv_qp* get() const { return qp.get(); }
  uint32_t qp_num() const { return qp ? qp->qp_num : 0; }
  void reset() {
    qp.reset();
    recv_cq.reset();
    send_cq.reset();
  }
};

struct EndConfig {
  ibv_qp_type type = IBV_QPT_RC;
  QpCaps caps;
  int send_cqe = 64;
  int recv_cqe = 64;
  int sq_sig_all = 0;
  ibv_srq* srq = nullptr;
  ibv_comp_channel* recv_channel = nullptr;
  ibv_comp_channel* send_channel = nullptr;  // (a send CQ made with ibv_create_cq)
  // Non-zero: the send CQ is made with ibv_create_cq_ex and these
  // ibv_create_cq_attr_flags (e.g. IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN).
  uint32_t send_cq_flags = 0;
  bool send_cq_ex = false;  // made with ibv_create_cq_ex even without flags
  uint64_t send_cq_wc_flags = 0;  // wc_flags beyond IBV_WC_STANDARD_FLAGS (implies send_cq_ex)
  ibv_pd* pd = nullptr;  // nullptr: the fixture's PD
};

// Creates the CQs and the QP of `end` on context, in pd (config.pd ignored).
testing::AssertionResult CreateEndOn(ibv_context* context, ibv_pd* pd, QpEnd* end, const EndConfig& config);

// What the RESET -> INIT -> RTR -> RTS walk sets.
struct ConnectParams {
  unsigned access = kRcRemoteAccess;  // qp_access_flags (RC/UC; UC keeps only REMOTE_WRITE)
  ibv_mtu path_mtu = IBV_MTU_1024;    // capped at the port's active_mtu
  uint8_t timeout = 14;               // RC: 4.096 us * 2^14 = 67 ms
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;              // 7: retry forever
  uint8_t min_rnr_timer = 1;          // 0.01 ms
  uint8_t max_rd_atomic = 1;
  uint8_t max_dest_rd_atomic = 1;
  uint32_t qkey = kTestQkey;          // UD
  uint32_t sq_psn = 0;
  uint32_t rq_psn = 0;
  bool grh = false;                   // send a GRH even where the link does not need one
};

// The address of a port: its LID, and a GRH to its GID at gid_index when
// the link layer is Ethernet (RoCE) or `grh` asks for one.
testing::AssertionResult PortAddress(ibv_context* context, uint8_t port, int gid_index, bool grh,
                                     ibv_ah_attr* out);

// Moves qp through RESET -> INIT -> RTR -> RTS with `params`; RC/UC connect
// to dest_qpn at `remote` (ignored for UD). `port` is the local port.
testing::AssertionResult ModifyToInit(ibv_qp* qp, uint8_t port, const ConnectParams& params);
testing::AssertionResult ModifyToRtr(ibv_qp* qp, uint32_t dest_qpn, const ibv_ah_attr& remote,
                                     const ConnectParams& params);
testing::AssertionResult ModifyToRts(ibv_qp* qp, const ConnectParams& params);
testing::AssertionResult BringUp(ibv_qp* qp, uint8_t port, uint32_t dest_qpn, const ibv_ah_attr& remote,
                                 const ConnectParams& params);
testing::AssertionResult ModifyToState(ibv_qp* qp, ibv_qp_state state);
// Connects a and b to each other (RC/UC) or brings both up (UD) on `port` of
// context, each addressing the port itself at gid_index (loopback); path MTUs
// capped at `active_mtu`, each side's rq_psn the other's sq_psn.
testing::AssertionResult ConnectOn(ibv_context* context, uint8_t port, int gid_index, ibv_mtu active_mtu, QpEnd& a,
                                   QpEnd& b, const ConnectParams& a_params, const ConnectParams& b_params);

// Fixture for QP tests: a PD on the fixture's context, helpers bound to the
// run's device, port and GID index, and a connected pair a_ <-> b_.
class QpTest : public VerbsTest {
 protected:
  void SetUp() override;
  void TearDown() override;

  ibv_pd* pd() const { return pd_.get(); }
  bool roce() const { return port_attr().link_layer == IBV_LINK_LAYER_ETHERNET; }
  // This port's own address (loopback), with a GRH on RoCE or when asked.
  ibv_ah_attr LocalAddress(bool grh = false) const;
  // The path MTU the helpers use: 1024 or the port's active MTU if smaller.
  ibv_mtu DefaultMtu() const;

  testing::AssertionResult CreateEnd(QpEnd* end, const EndConfig& config = {});
  // Connects a and b to each other (RC/UC) or brings both up (UD) on this port.
  testing::AssertionResult Connect(QpEnd& a, QpEnd& b, const ConnectParams& a_params = {},
                                   const ConnectParams& b_params = {});
  // Creates a_ and b_ with `config` and connects them.
  testing::AssertionResult MakePair(const EndConfig& config = {}, const ConnectParams& params = {});
  testing::AssertionResult MakePair(const EndConfig& a_config, const EndConfig& b_config,
                                    const ConnectParams& a_params, const ConnectParams& b_params);

  bool HasAtomics() const { return device_attr().atomic_cap != IBV_ATOMIC_NONE; }

  // Declared in destruction order (last destroyed first): acks before the
  // objects they name, QPs before their CQs, SRQ and channel after the QPs.
  PdPtr pd_;
  ChannelPtr channel_;
  SrqPtr srq_;
  QpEnd a_;
  QpEnd b_;
  EventAcks acks_;
};

}  // namespace conformance
