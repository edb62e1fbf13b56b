/* simverbs control API for rdma_cm: faults of the simulated connection manager.
 *
 * Exported by the simulator's librdmacm.so.1 in the version node SIMVERBS_1;
 * resolve them with dlsym like the rest of the control API (simverbs.h). Each
 * call acts on the connection manager of the calling process only; to reach
 * the processes of a fabric from outside, use `simverbs inject CM_REJECT`,
 * `CM_DROP` or `ADDR_CHANGE`, or a fault plan (fixtures/FORMAT.md). No call
 * blocks.
 *
 * DEVICE_REMOVAL comes with IBV_EVENT_DEVICE_FATAL (simverbs_raise_device_fatal,
 * `simverbs inject DEVICE_FATAL`, a plan), as on an mlx5 HCA, whose fatal error
 * is followed by the device's removal: every rdma_cm id of the process on
 * that device gets RDMA_CM_EVENT_DEVICE_REMOVAL.
 */
#ifndef SIMVERBS_SIMVERBS_RDMACM_H
#define SIMVERBS_SIMVERBS_RDMACM_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CM messages the CM resends when no answer comes (values as IBTA's
 * order of the messages in the simulator's CM). */
enum simverbs_cm_message {
  SIMVERBS_CM_REQ = 1,      /* rdma_connect (RC, RDMA_PS_TCP / RDMA_PS_IB) */
  SIMVERBS_CM_REP = 2,      /* rdma_accept */
  SIMVERBS_CM_DREQ = 5,     /* rdma_disconnect */
  SIMVERBS_CM_SIDR_REQ = 7, /* rdma_connect on a UD id (RDMA_PS_UDP) */
};

/* The next `count` connection requests that reach this process's listeners
 * are rejected by the CM before the listener sees them: no CONNECT_REQUEST;
 * the connecting side gets RDMA_CM_EVENT_REJECTED with status `reason` (an
 * IBTA CM reject reason, 1..255; 28 is "consumer defined", what a passive
 * rdma_cm that cannot take a request sends). A UD lookup (SIDR) is answered
 * with status 2, "rejected": the client gets UNREACHABLE with status 2.
 * count 0 disarms. EINVAL for a reason out of range. */
int simverbs_cm_reject_requests(unsigned int count, int reason);

/* The next `count` messages of `message` this process sends are lost; a REQ
 * or SIDR_REQ that reaches a listener of this process counts as well (lost on
 * its way in: the listener hears nothing, the sender's CM resends it, so a
 * fault armed in a server reaches clients started later). The
 * CM resends a message that gets no answer every 100 ms, 15 times (rdma_cm's
 * CMA_MAX_CM_RETRIES; the kernel waits about 4 s each): lose fewer than 16
 * and the connection is only late; lose 16 and the CM gives up:
 *   REQ, SIDR_REQ  the client gets UNREACHABLE, status -ETIMEDOUT
 *   REP            both sides get UNREACHABLE, status -ETIMEDOUT
 *   DREQ           the side that disconnects gets DISCONNECTED (then
 *                  TIMEWAIT_EXIT); its peer hears nothing until the id goes.
 * count 0 disarms. EINVAL for another message. */
int simverbs_cm_drop_messages(enum simverbs_cm_message message, unsigned int count);

/* Raises an rdma_cm event on every id of this process on the context's
 * device:
 *   RDMA_CM_EVENT_ADDR_CHANGE     ids bound to port `port_num` (the kernel
 *                                 raises it on a bonding fail-over)
 *   RDMA_CM_EVENT_DEVICE_REMOVAL  every id on the device (port_num is not
 *                                 read); the ids then only accept
 *                                 rdma_destroy_id and rdma_ack_cm_event, a
 *                                 connected peer gets DISCONNECTED, and the
 *                                 device's addresses no longer resolve in
 *                                 this process
 * Returns the number of ids that got it (0 or more), or -EINVAL for another
 * event type, a bad context or port. */
int simverbs_cm_raise_event(struct ibv_context *context, uint8_t port_num, enum rdma_cm_event_type type);

#ifdef __cplusplus
}
#endif

#endif /* SIMVERBS_SIMVERBS_RDMACM_H */
