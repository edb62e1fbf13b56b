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

#define SIMVERBS_API_VERSION 1

/* The API version the library implements (SIMVERBS_API_VERSION). */
int simverbs_version(void);

/* Raises an affiliated async event on an object. The event reaches
 * ibv_get_async_event of the context that owns the object, with
 * event.element set to the object, and counts for destroy like a real one.
 * EINVAL if the event type does not belong to that kind of object:
 *   CQ:  IBV_EVENT_CQ_ERR (the CQ also enters the error state)
 *   QP:  QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, COMM_EST, SQ_DRAINED, PATH_MIG,
 *        PATH_MIG_ERR, QP_LAST_WQE_REACHED
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

#ifdef __cplusplus
}
#endif

#endif /* SIMVERBS_SIMVERBS_H */
