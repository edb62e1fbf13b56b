#pragma once

// A device profile: what a simulated HCA reports and how it behaves.
// The file format is documented in fixtures/FORMAT.md.

#include <infiniband/verbs.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "result.h"

namespace simverbs {

// Values as ibv_query_gid_type reports them (rdma-core's enum ibv_gid_type_sysfs).
enum class GidKind { kIbRoceV1 = 0, kRoceV2 = 1 };

struct GidProfile {
  ibv_gid gid{};
  GidKind kind = GidKind::kIbRoceV1;
};

struct PortProfile {
  ibv_port_attr attr{};
  std::vector<GidProfile> gids;  // index = GID index
  std::vector<uint16_t> pkeys;   // index = P_Key index
};

struct DeviceProfile {
  std::string name;  // sim0, sim1, ...
  ibv_node_type node_type = IBV_NODE_CA;
  ibv_transport_type transport_type = IBV_TRANSPORT_IB;
  int num_comp_vectors = 1;
  ibv_device_attr_ex attr_ex{};  // attr_ex.orig_attr is ibv_query_device
  std::map<std::string, std::string> sysfs;  // files under the ibdev sysfs dir
  std::vector<PortProfile> ports;            // index 0 = port 1
};

// Choices where real HCAs legally differ (fixtures/FORMAT.md, "behaviour").
struct Behaviour {
  // What a completion that does not fit in its CQ does.
  enum class CqOverrun {
    kCascade,  // CQ_ERR once, CQ unusable, every QP on it to ERR with QP_FATAL (default)
    kLazy,     // IBTA: QP_FATAL when a QP next tries to complete into the CQ
    kRxe61,    // kernel rxe 6.1: CQ_ERR per lost CQE; send side goes on, receiving QP to ERR
  };
  CqOverrun cq_overrun = CqOverrun::kCascade;
  // Posting a send before RTS: EINVAL (most providers' kernels) or queue it until RTS.
  bool queue_send_before_rts = false;
  // Responder R_Key violations raise IBV_EVENT_QP_ACCESS_ERR (IBTA C9-222.1.1; rxe 6.1 does not).
  bool qp_access_err_event = true;
  // An SRQ-attached QP entering ERR raises IBV_EVENT_QP_LAST_WQE_REACHED (IBTA o11-5.2.5; rxe >= 6.5).
  bool last_wqe_reached_event = true;
  // A packet reaching a QP in RTR raises IBV_EVENT_COMM_EST (IBTA; rxe never does).
  bool comm_est_event = true;
  // SQ_DRAINED only when en_sqd_async_notify was set (IBTA), or always (rxe).
  bool sq_drained_always = false;
  // A send queue slot is free again once the WQE's completion is polled (or,
  // for an unsignaled WQE, a later one's: mlx5's poll moves the send queue's
  // tail), or as soon as the WQE completes (rxe: the completer moves the
  // queue's consumer index).
  bool send_slots_freed_at_poll = true;
  // A receive queue slot is free again once the WQE's completion is polled
  // (mlx5's poll moves the receive queue's tail), or as soon as the WQE is
  // consumed (rxe: the responder moves the queue's consumer index). The same
  // for an SRQ's WQEs (mlx5_free_srq_wqe at poll); an XRC SRQ's are free
  // once consumed under either.
  bool recv_slots_freed_at_poll = true;
  // A send error on a UC or UD QP moves it to SQE, its receive queue still
  // working (IBA 10.3.1), or to ERR as on RC, its receives flushed (rxe 6.1:
  // the requester's error exit calls rxe_qp_error for every QP type).
  bool unreliable_send_error_to_err = false;
  // A UD WR whose remote_qkey has the high-order bit set sends with the QP's
  // own Q_Key (IBTA 10.2.4), or with the WR's value as it is (rxe 6.1:
  // init_req_packet puts wr.ud.remote_qkey in the DETH).
  bool wr_qkey_high_bit_literal = false;
  // The memory of a receive taken from an SRQ is checked against the SRQ's PD
  // (IBTA; mlx5: the SRQ's WQEs are the SRQ's), or against the QP's (rxe 6.1:
  // send_data_in copies with qp->pd).
  bool srq_recv_checked_against_qp_pd = false;
  // ibv_rereg_mr with flags 0: libibverbs passes it on, so a kernel provider
  // fails it as a command (IBV_REREG_MR_ERR_CMD), as every one does; or an
  // input error (IBV_REREG_MR_ERR_INPUT), which no provider gives.
  bool rereg_no_flags_cmd_error = true;
  // ibv_create_cq_ex takes every wc_flags bit libibverbs knows (as mlx5, which
  // has CVLAN, FLOW_TAG and TM_INFO), or only BYTE_LEN..DLID_PATH_BITS, the
  // others EOPNOTSUPP (rxe: RXE_SUP_WC_EX_FLAGS).
  bool cq_ex_all_wc_flags = true;
  // IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN is taken (mlx5), or refused by the
  // kernel driver (rxe 6.1: rxe_create_cq takes no flags).
  bool cq_ignore_overrun = true;
  // An SRQ holds the entries asked for, or (rxe) 2^k - 1 >= them: ibv_query_srq
  // reports that, ibv_create_srq still the size asked for (rxe 6.1, measured).
  bool srq_size_pow2_minus_one = false;
  // A QP's send and receive queues hold the WRs asked for, or (rxe) 2^k - 1 >=
  // them: ibv_query_qp reports that, ibv_create_qp still the counts asked for
  // (rxe 6.1, measured).
  bool qp_size_pow2_minus_one = false;
  // A QP's max_send_sge is what was asked for, or (rxe) grows to fill the send
  // WQE's room of max(max_send_sge * 16, max_inline_data) bytes
  // (rxe_qp_init_req; rxe 6.1, measured).
  bool send_sge_fills_inline_room = false;
  // ibv_modify_qp with IBV_QP_RATE_LIMIT on a QP that cannot take it: EINVAL
  // (mlx5: rate limits are for raw packet QPs), or EOPNOTSUPP where the
  // provider passes no mask bit above IBV_QP_DEST_QPN (rxe: libibverbs'
  // ibv_cmd_modify_qp; rxe 6.1, measured).
  bool rate_limit_unsupported = false;
  // ibv_create_srq with max_wr 0 gets a one-entry SRQ, or EINVAL (rxe:
  // rxe_srq_chk_init).
  bool srq_zero_wr_einval = false;
  // The provider has rereg_mr (rxe 6.1's has none: every ibv_rereg_mr that
  // passes libibverbs' own checks fails as a command, EOPNOTSUPP).
  bool rereg_mr_supported = true;
  // ibv_modify_qp to RESET and ibv_destroy_qp remove the QP's unpolled
  // completions from its CQs, as mlx4/mlx5 do (mlx5_modify_qp and
  // mlx5_destroy_qp → mlx5_cq_clean); rxe leaves them.
  bool reset_discards_completions = true;
  // A CQ gets the entries asked for, or (rxe) a ring of the next power of two
  // above them, reported as one entry less (rxe_queue_init).
  bool cq_size_pow2_minus_one = false;
  // IBV_WC_GRH in a receive completion: only for UD with a GRH (ibv_poll_cq(3)),
  // or in every successful receive completion (rxe: do_complete).
  bool recv_wc_grh_always = false;
  // An atomic whose remote_addr is not 8-byte aligned: the responder NAKs it
  // as an invalid request (IBTA; IBV_WC_REM_INV_REQ_ERR at the requester), or
  // ibv_post_send refuses it with EINVAL (rxe: validate_send_wr).
  bool misaligned_atomic_post_error = false;
  // Which completions wake a solicited-only arm: a receive of a message with
  // the Solicited Event bit, and every completion in error (ibv_req_notify_cq(3));
  // or receives only, with the bit or flushed (rxe: rxe_comp.c do_complete
  // posts send completions unsolicited, errors too; rxe_resp.c do_complete
  // passes the packet's SE bit, 1 for a flush).
  bool solicited_receives_only = false;
  // Adversarial but legal choices, each taken by the seeded scheduler:
  // ibv_req_notify_cq on a CQ that holds unpolled completions may fire an event
  // at once (the completions were already there: the event is "spurious" to a
  // program that drains the CQ before re-arming).
  bool spurious_comp_events = false;
  // A message may take any receive posted to an SRQ, not the oldest.
  bool srq_any_order = false;
  // A new QP may get the number of a QP destroyed just before.
  bool qp_number_reuse = false;
  // The fields of an error completion that ibv_poll_cq(3) calls invalid
  // (everything but wr_id, status, qp_num, vendor_err) hold garbage, not zero.
  bool error_wc_garbage = false;
  // The largest inline payload a send WR may carry (ibv_qp_cap::max_inline_data;
  // rxe: RXE_MAX_INLINE_DATA, 512).
  uint32_t max_inline_data = 256;
  // Protocol timers (transport timeout, RNR timer) run this many times faster than real time.
  uint32_t time_scale = 16384;
};

struct Profile {
  std::string name;
  std::string path;
  std::string description;
  std::vector<DeviceProfile> devices;
  Behaviour behaviour;
};

// Parses a profile file. On failure the error text names the file and the field.
struct ProfileLoad {
  Profile profile;
  std::string error;  // empty on success
};
ProfileLoad LoadProfileFile(const std::string& path);

// Loads a profile by name ("sim-ib", looked up in SIMVERBS_PROFILE_DIR, the
// source tree's fixtures/devices and the installed data dir) or by path to a
// .json file; an empty name means the default profile.
ProfileLoad LoadProfile(const std::string& name_or_path);
std::vector<std::string> ProfileSearchDirs();
std::vector<std::string> AvailableProfiles();

inline constexpr const char* kDefaultProfileName = "sim-ib";

}  // namespace simverbs
