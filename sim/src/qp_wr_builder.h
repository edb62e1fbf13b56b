#pragma once

// The ibv_qp_ex work-request builder (ibv_wr_start / ibv_wr_send / ... /
// ibv_wr_complete, see ibv_wr_post(3)): the WRs are collected between
// wr_start and wr_complete and then posted as one ibv_post_send list, so both
// APIs share one execution path.

#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <vector>

namespace simverbs {

class QpWrBuilder {
 public:
  // Fills the wr_* function pointers of `qp_ex`.
  static void Install(ibv_qp_ex* qp_ex);

 public:  // internal to qp_wr_builder.cc and Qp
  struct Entry {
    ibv_send_wr wr{};
    std::vector<ibv_sge> sges;
    std::vector<uint8_t> inline_data;
  };
  std::deque<Entry> entries_;
  int error_ = 0;  // an unsupported builder call: wr_complete fails with it
};

}  // namespace simverbs
