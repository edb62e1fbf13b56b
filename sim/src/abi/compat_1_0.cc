// The IBVERBS_1.0 variants of functions whose structs changed in 1.1
// (rdma-core's compat-1_0.c). Programs built since 2006 bind the 1.1
// defaults; anything that binds these gets a clean failure: NULL or an errno
// return, with errno ENOSYS.

#include <cerrno>
#include <cstdint>

// .symver directives rather than GCC's symver attribute, which clang lacks.
#define SIMVERBS_COMPAT_1_0(ret, name, value)                        \
  __asm__(".symver sv_compat_" #name "," #name "@IBVERBS_1.0");      \
  extern "C" __attribute__((visibility("default"))) ret sv_compat_##name(...) { \
    errno = ENOSYS;                                                  \
    return value;                                                    \
  }

SIMVERBS_COMPAT_1_0(void, ibv_ack_async_event, )
SIMVERBS_COMPAT_1_0(void, ibv_ack_cq_events, )
SIMVERBS_COMPAT_1_0(void*, ibv_alloc_pd, nullptr)
SIMVERBS_COMPAT_1_0(int, ibv_attach_mcast, ENOSYS)
SIMVERBS_COMPAT_1_0(int, ibv_close_device, ENOSYS)
SIMVERBS_COMPAT_1_0(void*, ibv_create_ah, nullptr)
SIMVERBS_COMPAT_1_0(void*, ibv_create_cq, nullptr)
SIMVERBS_COMPAT_1_0(void*, ibv_create_qp, nullptr)
SIMVERBS_COMPAT_1_0(void*, ibv_create_srq, nullptr)
SIMVERBS_COMPAT_1_0(int, ibv_dealloc_pd, ENOSYS)
SIMVERBS_COMPAT_1_0(int, ibv_dereg_mr, ENOSYS)
SIMVERBS_COMPAT_1_0(int, ibv_destroy_ah, ENOSYS)
SIMVERBS_COMPAT_1_0(int, ibv_destroy_cq, ENOSYS)
SIMVERBS_COMPAT_1_0(int, ibv_destroy_qp, ENOSYS)
SIMVERBS_COMPAT_1_0(int, ibv_destroy_srq, ENOSYS)
SIMVERBS_COMPAT_1_0(int, ibv_detach_mcast, ENOSYS)
SIMVERBS_COMPAT_1_0(void, ibv_free_device_list, )
SIMVERBS_COMPAT_1_0(int, ibv_get_async_event, ENOSYS)
SIMVERBS_COMPAT_1_0(int, ibv_get_cq_event, ENOSYS)
SIMVERBS_COMPAT_1_0(uint64_t, ibv_get_device_guid, 0)
SIMVERBS_COMPAT_1_0(void*, ibv_get_device_list, nullptr)
SIMVERBS_COMPAT_1_0(void*, ibv_get_device_name, nullptr)
SIMVERBS_COMPAT_1_0(int, ibv_modify_qp, ENOSYS)
SIMVERBS_COMPAT_1_0(int, ibv_modify_srq, ENOSYS)
SIMVERBS_COMPAT_1_0(void*, ibv_open_device, nullptr)
SIMVERBS_COMPAT_1_0(int, ibv_query_device, ENOSYS)
SIMVERBS_COMPAT_1_0(int, ibv_query_gid, ENOSYS)
SIMVERBS_COMPAT_1_0(int, ibv_query_pkey, ENOSYS)
SIMVERBS_COMPAT_1_0(int, ibv_query_port, ENOSYS)
SIMVERBS_COMPAT_1_0(int, ibv_query_qp, ENOSYS)
SIMVERBS_COMPAT_1_0(int, ibv_query_srq, ENOSYS)
SIMVERBS_COMPAT_1_0(void*, ibv_reg_mr, nullptr)
SIMVERBS_COMPAT_1_0(int, ibv_resize_cq, ENOSYS)

// ibv_register_driver@IBVERBS_1.1 (not default): the pre-34 provider
// registration. Accepted and ignored, as verbs_register_driver_34 is.
__asm__(".symver sv_compat_ibv_register_driver,ibv_register_driver@IBVERBS_1.1");
extern "C" __attribute__((visibility("default"))) void sv_compat_ibv_register_driver(const char*, void*) {}

