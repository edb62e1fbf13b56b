/* simverbs control API: drive the simulated HCA from a test.
 *
 * Exported by the simulator's libibverbs.so.1 in the version node SIMVERBS_1.
 * Programs that must also run on real hardware resolve these functions with
 * dlsym(RTLD_DEFAULT, "simverbs_version"): a NULL result means "not on the
 * simulator". Every function returns 0 or an errno value and never blocks.
 */
#ifndef SIMVERBS_SIMVERBS_H
#define SIMVERBS_SIMVERBS_H

#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SIMVERBS_API_VERSION 2

/* The API version the library implements (SIMVERBS_API_VERSION). */
int simverbs_version(void);

/* Raises an affiliated async event on an object. The event reaches
 * ibv_get_async_event of the context that owns the object, with
 * event.element set to the object, and counts for destroy like a real one.
 * EINVAL if the event type does not belong to that kind of object:
 *   CQ:  IBV_EVENT_CQ_ERR (the CQ also enters the error state, and its QPs
 *        follow as after an overrun under the profile's cq_overrun)
 *   QP:  QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, COMM_EST, SQ_DRAINED, PATH_MIG,
 *        PATH_MIG_ERR, QP_LAST_WQE_REACHED (the event only: the QP's state is
 *        left as it is; simverbs_set_qp_state moves it as the HCA would)
 *   SRQ: SRQ_ERR, SRQ_LIMIT_REACHED
 * WQ_FATAL is not supported (the simulator has no WQs): ibv_create_wq fails.
 */
int simverbs_raise_cq_event(struct ibv_cq *cq, enum ibv_event_type type);
int simverbs_raise_qp_event(struct ibv_qp *qp, enum ibv_event_type type);
int simverbs_raise_srq_event(struct ibv_srq *srq, enum ibv_event_type type);

/* Raises an unaffiliated event on a port of the context's device; every open
 * context of that device receives it, with event.element.port_num set.
 * PORT_ERR also takes the port DOWN and PORT_ACTIVE brings it back ACTIVE,
 * as ibv_query_port then shows. Types: PORT_ACTIVE, PORT_ERR, LID_CHANGE,
 * PKEY_CHANGE, SM_CHANGE, CLIENT_REREGISTER, GID_CHANGE. */
int simverbs_raise_port_event(struct ibv_context *context, uint8_t port_num, enum ibv_event_type type);

/* Raises IBV_EVENT_DEVICE_FATAL on every open context of the device; those
 * contexts are fatal from then on: commands fail with EIO, destroys succeed,
 * posts are accepted and never executed (sim/src/fault/device_fatal.h).
 * Contexts opened afterwards work. */
int simverbs_raise_device_fatal(struct ibv_context *context);

/* Adds a completion to a CQ as the HCA would (arming, channel events and
 * overrun rules apply). solicited: the completion carries the SE bit. */
int simverbs_push_completion(struct ibv_cq *cq, const struct ibv_wc *wc, int solicited);

/* ---- Faults ---------------------------------------------------------- */

/* The nth send work request posted to the QP from now on (1 = the next one)
 * completes with `status` instead of executing, with the consequences a real
 * error of that status has: an RC QP goes to ERR and flushes the rest, a UC or
 * UD QP goes to SQE. The error completion is generated even if unsignaled.
 * EINVAL for nth 0, IBV_WC_SUCCESS or a value that is not an ibv_wc_status. A later call replaces an armed one. */
int simverbs_fail_send_wr(struct ibv_qp *qp, unsigned int nth, enum ibv_wc_status status);

/* The HCA moves the QP, as after an error it detected itself:
 *   IBV_QPS_ERR: from any state but RESET and ERR; raises IBV_EVENT_QP_FATAL and flushes.
 *   IBV_QPS_SQE: UC and UD QPs in RTS; outstanding send WRs flush; receives go on.
 * EINVAL otherwise. (A CQ is put in error with simverbs_raise_cq_event(cq, IBV_EVENT_CQ_ERR).) */
int simverbs_set_qp_state(struct ibv_qp *qp, enum ibv_qp_state state);

/* Allocation failures. Every point where an object is created has a name
 * ("alloc_pd", "reg_mr", "create_cq", ...); simverbs_fault_point_name(i) for
 * i in [0, simverbs_fault_point_count()) lists them, so a test can sweep all.
 * simverbs_fail_after(name, calls, err): `calls` more calls succeed, the next
 * one fails with `err` (e.g. ENOMEM) before creating anything, then the point
 * disarms. The counts are per process. EINVAL for an unknown name or err <= 0.
 * "deliver_packet" is not a verb: the next packet this process delivers to one
 * of its QPs runs out of memory and is lost, as on a wire (err is not used);
 * a reliable sender recovers it by retransmission. A packet whose message its
 * sender has completed already (a WRITE or READ the other process copied
 * itself), or one that hands an XRC message between the process of the target
 * QP and that of its SRQ, is not lost: the loss falls on the next packet. */
int simverbs_fault_point_count(void);
const char *simverbs_fault_point_name(int index); /* NULL out of range */
int simverbs_fail_after(const char *point, unsigned int calls, int err);
void simverbs_clear_faults(void);

/* ---- Delivery control -------------------------------------------------- */

/* While a CQ is held, its completions wait outside it: ibv_poll_cq does not
 * see them and they raise no completion events. Releasing pushes them into the
 * CQ in completion order, as if they had just completed (arming, events and
 * overrun rules apply; ENOSPC if one overran the CQ). EINVAL if not held. */
int simverbs_hold_completions(struct ibv_cq *cq);
int simverbs_release_completions(struct ibv_cq *cq);

/* The threads blocked now in ibv_get_async_event on the context (or in
 * ibv_get_cq_event on the channel); -1 for a bad argument. A test waits for
 * this count instead of sleeping until its threads are parked. */
int simverbs_async_waiters(struct ibv_context *context);
int simverbs_comp_waiters(struct ibv_comp_channel *channel);

/* The next event queued on the context (channel) goes to the blocked thread
 * at `index`, 0 being the one that has waited longest. Without this the seeded
 * scheduler chooses. EINVAL if fewer threads are blocked. */
int simverbs_deliver_async_to(struct ibv_context *context, unsigned int index);
int simverbs_deliver_comp_to(struct ibv_comp_channel *channel, unsigned int index);

/* ---- Determinism ------------------------------------------------------- */

/* The seed of the run's scheduler: SIMVERBS_SEED, or the one drawn at start.
 * Every choice among legal behaviours (which blocked thread gets an event,
 * spurious completion events, SRQ order, QP number reuse, the contents of
 * invalid completion fields) comes from it. */
unsigned long long simverbs_seed(void);
/* Restarts the scheduler as if the run had started with SIMVERBS_SEED=seed. */
void simverbs_reseed(unsigned long long seed);

#ifdef __cplusplus
}
#endif

#endif /* SIMVERBS_SIMVERBS_H */
