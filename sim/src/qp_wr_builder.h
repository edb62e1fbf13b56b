#pragma once

// The ibv_qp_ex work-request builder (ibv_wr_start / ibv_wr_send / ... /
// ibv_wr_complete, see ibv_wr_post(3)): the WRs are collected between
// wr_start and wr_complete and then posted as one ibv_post_send list, so both
// APIs share one execution path; but all of them or none (a refused WR aborts
// the whole posting), and wr_start .. wr_complete/wr_abort is a per-QP
// critical section, as the man page's CONCURRENCY asks.

#include <infiniband/verbs.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
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
    bool is_inline = false;  // set by wr_set_inline_data(_list), not by wr_flags
  };
  std::deque<Entry> entries_;
  int error_ = 0;  // an unsupported builder call: wr_complete fails with it
  // The critical section, from wr_start to wr_complete/wr_abort: a gate, not a
  // mutex, so that any thread may end it (the providers' spinlocks have no
  // owner either), and a QP destroyed with it open destroys no held lock.
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool open_ = false;              // a section is open (gate_mu_)
  std::thread::id opened_by_;      // the thread that opened it (gate_mu_)
};

}  // namespace simverbs
