#pragma once

// What a context is after IBV_EVENT_DEVICE_FATAL: the simulator follows an
// mlx5 HCA in its internal-error state, the state a real program meets
// between the event and the device's removal.
//
// Sources. mlx5 dispatches IB_EVENT_DEVICE_FATAL on a firmware syndrome, and
// from then on the driver answers firmware commands itself
// (mlx5_internal_err_ret_value in drivers/net/ethernet/mellanox/mlx5/core/
// cmd.c): destroy/dealloc commands succeed, every other command fails with
// EIO. rdma-core's mlx5 provider only notes the state (mlx5_async_event sets
// MLX5_CTX_FLAGS_FATAL_STATE); its posts still write the queue and ring a
// doorbell the dead HCA never reads, and its CQs are user memory where no
// new CQE appears. After a later removal the kernel disassociates the
// context (ib_uverbs_free_hw_resources): commands fail with EIO, destroys too
// unless RDMAV_ALLOW_DISASSOC_DESTROY is set, and the async fd delivers
// DEVICE_FATAL as the last event ("the user knows it has reached the end of
// the event stream when it sees IB_EVENT_DEVICE_FATAL",
// uverbs_std_types_async_fd.c). rxe never raises DEVICE_FATAL.
//
// So, on a fatal context:
//   create/alloc/register/open, ibv_rereg_mr, modify and query of objects,
//   ibv_query_port, ibv_resize_cq, ibv_attach_mcast ...
//                                             fail with EIO (NULL + errno EIO)
//   ibv_query_device(_ex)                     succeeds (the kernel answers from its cache)
//   destroy/dealloc/dereg, ibv_close_device   succeed, so a program can clean up
//   ibv_post_send/recv/srq_recv, ibv_wr_complete  return 0; the work is never executed
//   ibv_poll_cq                               returns what the CQ already held, nothing new
//   its QPs                                   leave the wire: packets to them are lost
//                                             (peers see retry/timeouts), timers stop
//   ibv_get_async_event                       DEVICE_FATAL is the last event; then it blocks
//                                             (the control API's raise/push/set calls: EIO)
// The state belongs to the contexts open at the time; a context opened
// afterwards works (as on mlx5 once the device has recovered).

#include <infiniband/verbs.h>

namespace simverbs {

class Context;

// Makes `ctx` fatal and queues IBV_EVENT_DEVICE_FATAL on it. False (nothing
// done) when it already was. Must not be called with the engine lock held.
bool EnterDeviceFatal(Context* ctx);

// True when `ctx` is a simulated context whose device went fatal: the command
// must fail with EIO.
bool DeviceFatal(const ibv_context* ctx);

}  // namespace simverbs
