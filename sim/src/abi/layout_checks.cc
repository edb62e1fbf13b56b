// Layout facts of <infiniband/verbs.h> (rdma-core 44) that the simulator and
// the applications' inline functions rely on. A failure here means the
// headers are not the ABI this library reproduces.

#include <infiniband/verbs.h>

#include <cstddef>

#include "cq.h"

// verbs_get_ctx(): the context is the last field, with sz right before it.
static_assert(offsetof(verbs_context, context) + sizeof(ibv_context) == sizeof(verbs_context));
static_assert(offsetof(verbs_context, sz) + sizeof(size_t) == offsetof(verbs_context, context));
// The first op of verbs_context is query_port; the struct grows by prepending.
static_assert(offsetof(verbs_context, query_port) == 0);
static_assert(offsetof(verbs_context, _ABI_placeholder3) + sizeof(uint64_t) == offsetof(verbs_context, sz));

// ibv_cq_ex_to_cq() is a plain cast: ibv_cq is a prefix of ibv_cq_ex.
static_assert(offsetof(ibv_cq, context) == offsetof(ibv_cq_ex, context));
static_assert(offsetof(ibv_cq, channel) == offsetof(ibv_cq_ex, channel));
static_assert(offsetof(ibv_cq, cq_context) == offsetof(ibv_cq_ex, cq_context));
static_assert(offsetof(ibv_cq, handle) == offsetof(ibv_cq_ex, handle));
static_assert(offsetof(ibv_cq, cqe) == offsetof(ibv_cq_ex, cqe));
static_assert(offsetof(ibv_cq, mutex) == offsetof(ibv_cq_ex, mutex));
static_assert(offsetof(ibv_cq, cond) == offsetof(ibv_cq_ex, cond));
static_assert(offsetof(ibv_cq, comp_events_completed) == offsetof(ibv_cq_ex, comp_events_completed));
static_assert(offsetof(ibv_cq, async_events_completed) == offsetof(ibv_cq_ex, async_events_completed));

// The event records of the uverbs ABI that ibv_get_*_event read: the
// simulator queues events in memory but keeps the same element types.
static_assert(sizeof(((ibv_async_event*)nullptr)->element) == sizeof(void*));

// The 20 event types of rdma-core 44.
static_assert(IBV_EVENT_WQ_FATAL == 19);
static_assert(IBV_EVENT_GID_CHANGE == 18);

// ibv_port_attr as the IBVERBS_1.1 ibv_query_port fills it ends before flags.
static_assert(offsetof(ibv_port_attr, flags) == offsetof(ibv_port_attr, link_layer) + 1);
