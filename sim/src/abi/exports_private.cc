// IBVERBS_PRIVATE_34: the interface between libibverbs and its kernel
// providers. Provider libraries that programs load (perftest links libmlx5
// and libefa) import these at load time, so they must exist; with no kernel
// behind them they fail as their return type allows. Provider registration
// is accepted and ignored: simulated devices are the only devices.

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdarg>
#include <cstdint>

#include "abi/c_api.h"

// The variadic definitions accept any argument list; callers pass the
// provider ABI's arguments, which these stubs never read.
#define SIMVERBS_PRIVATE_CMD(name) \
  SIMVERBS_EXPORT int name(...) { return EOPNOTSUPP; }

SIMVERBS_PRIVATE_CMD(ibv_cmd_advise_mr)
SIMVERBS_PRIVATE_CMD(ibv_cmd_alloc_dm)
SIMVERBS_PRIVATE_CMD(ibv_cmd_alloc_mw)
SIMVERBS_PRIVATE_CMD(ibv_cmd_alloc_pd)
SIMVERBS_PRIVATE_CMD(ibv_cmd_attach_mcast)
SIMVERBS_PRIVATE_CMD(ibv_cmd_close_xrcd)
SIMVERBS_PRIVATE_CMD(ibv_cmd_create_ah)
SIMVERBS_PRIVATE_CMD(ibv_cmd_create_counters)
SIMVERBS_PRIVATE_CMD(ibv_cmd_create_cq)
SIMVERBS_PRIVATE_CMD(ibv_cmd_create_cq_ex)
SIMVERBS_PRIVATE_CMD(ibv_cmd_create_flow)
SIMVERBS_PRIVATE_CMD(ibv_cmd_create_flow_action_esp)
SIMVERBS_PRIVATE_CMD(ibv_cmd_create_qp)
SIMVERBS_PRIVATE_CMD(ibv_cmd_create_qp_ex)
SIMVERBS_PRIVATE_CMD(ibv_cmd_create_qp_ex2)
SIMVERBS_PRIVATE_CMD(ibv_cmd_create_rwq_ind_table)
SIMVERBS_PRIVATE_CMD(ibv_cmd_create_srq)
SIMVERBS_PRIVATE_CMD(ibv_cmd_create_srq_ex)
SIMVERBS_PRIVATE_CMD(ibv_cmd_create_wq)
SIMVERBS_PRIVATE_CMD(ibv_cmd_dealloc_mw)
SIMVERBS_PRIVATE_CMD(ibv_cmd_dealloc_pd)
SIMVERBS_PRIVATE_CMD(ibv_cmd_dereg_mr)
SIMVERBS_PRIVATE_CMD(ibv_cmd_destroy_ah)
SIMVERBS_PRIVATE_CMD(ibv_cmd_destroy_counters)
SIMVERBS_PRIVATE_CMD(ibv_cmd_destroy_cq)
SIMVERBS_PRIVATE_CMD(ibv_cmd_destroy_flow)
SIMVERBS_PRIVATE_CMD(ibv_cmd_destroy_flow_action)
SIMVERBS_PRIVATE_CMD(ibv_cmd_destroy_qp)
SIMVERBS_PRIVATE_CMD(ibv_cmd_destroy_rwq_ind_table)
SIMVERBS_PRIVATE_CMD(ibv_cmd_destroy_srq)
SIMVERBS_PRIVATE_CMD(ibv_cmd_destroy_wq)
SIMVERBS_PRIVATE_CMD(ibv_cmd_detach_mcast)
SIMVERBS_PRIVATE_CMD(ibv_cmd_free_dm)
SIMVERBS_PRIVATE_CMD(ibv_cmd_get_context)
SIMVERBS_PRIVATE_CMD(ibv_cmd_modify_cq)
SIMVERBS_PRIVATE_CMD(ibv_cmd_modify_flow_action_esp)
SIMVERBS_PRIVATE_CMD(ibv_cmd_modify_qp)
SIMVERBS_PRIVATE_CMD(ibv_cmd_modify_qp_ex)
SIMVERBS_PRIVATE_CMD(ibv_cmd_modify_srq)
SIMVERBS_PRIVATE_CMD(ibv_cmd_modify_wq)
SIMVERBS_PRIVATE_CMD(ibv_cmd_open_qp)
SIMVERBS_PRIVATE_CMD(ibv_cmd_open_xrcd)
SIMVERBS_PRIVATE_CMD(ibv_cmd_poll_cq)
SIMVERBS_PRIVATE_CMD(ibv_cmd_post_recv)
SIMVERBS_PRIVATE_CMD(ibv_cmd_post_send)
SIMVERBS_PRIVATE_CMD(ibv_cmd_post_srq_recv)
SIMVERBS_PRIVATE_CMD(ibv_cmd_query_context)
SIMVERBS_PRIVATE_CMD(ibv_cmd_query_device_any)
SIMVERBS_PRIVATE_CMD(ibv_cmd_query_mr)
SIMVERBS_PRIVATE_CMD(ibv_cmd_query_port)
SIMVERBS_PRIVATE_CMD(ibv_cmd_query_qp)
SIMVERBS_PRIVATE_CMD(ibv_cmd_query_srq)
SIMVERBS_PRIVATE_CMD(ibv_cmd_read_counters)
SIMVERBS_PRIVATE_CMD(ibv_cmd_reg_dm_mr)
SIMVERBS_PRIVATE_CMD(ibv_cmd_reg_dmabuf_mr)
SIMVERBS_PRIVATE_CMD(ibv_cmd_reg_mr)
SIMVERBS_PRIVATE_CMD(ibv_cmd_req_notify_cq)
SIMVERBS_PRIVATE_CMD(ibv_cmd_rereg_mr)
SIMVERBS_PRIVATE_CMD(ibv_cmd_resize_cq)

SIMVERBS_EXPORT int execute_ioctl(...) { return EOPNOTSUPP; }
SIMVERBS_EXPORT unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void*) { return num_attrs; }
SIMVERBS_EXPORT void __verbs_log(void*, uint32_t, const char*, ...) {}

SIMVERBS_EXPORT void* _verbs_init_and_alloc_context(...) {
  errno = EOPNOTSUPP;
  return nullptr;
}
SIMVERBS_EXPORT void* verbs_open_device(...) {
  errno = EOPNOTSUPP;
  return nullptr;
}
SIMVERBS_EXPORT void verbs_register_driver_34(const void*) {}
SIMVERBS_EXPORT void verbs_set_ops(void*, const void*) {}
SIMVERBS_EXPORT void verbs_uninit_context(void*) {}

SIMVERBS_EXPORT int ibv_read_ibdev_sysfs_file(char*, size_t, void*, const char*, ...) {
  errno = ENOENT;
  return -1;
}

// What libibverbs' verbs_init_cq does for a provider's CQ.
SIMVERBS_EXPORT void verbs_init_cq(ibv_cq* cq, ibv_context* context, ibv_comp_channel* channel, void* cq_context) {
  cq->context = context;
  cq->channel = channel;
  cq->cq_context = cq_context;
  cq->comp_events_completed = 0;
  cq->async_events_completed = 0;
  pthread_mutex_init(&cq->mutex, nullptr);
  pthread_cond_init(&cq->cond, nullptr);
}

extern "C" {
__attribute__((visibility("default"))) bool verbs_allow_disassociate_destroy = false;
}
