// Work queues (ibv_create_wq) on a device that has none.

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>

#include "conformance/lib/errno_capture.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/skip_if.h"

namespace conformance {
namespace {

class WqTest : public QpTest {};

// Rule: ibv_create_wq(3): "ibv_create_wq() returns a pointer to the created WQ, or NULL if the
//   request fails"; a device reports its receive WQ support in ibv_query_device_ex's
//   max_wq_type_rq, and libibverbs fails a verb the provider lacks with EOPNOTSUPP. Without WQs no
//   IBV_EVENT_WQ_FATAL can occur.
// Checks: on a device with max_wq_type_rq 0, ibv_create_wq for a receive WQ returns NULL with
//   errno EOPNOTSUPP.
TEST_F(WqTest, CreateWqFails_DeviceHasNoWqs) {
  ibv_device_attr_ex attr = {};
  ASSERT_EQ(ibv_query_device_ex(context(), nullptr, &attr), 0);
  SKIP_IF(attr.max_wq_type_rq != 0) << "(the device supports " << attr.max_wq_type_rq << " receive WQs)";
  CqPtr cq(ibv_create_cq(context(), 4, nullptr, nullptr, 0));
  ASSERT_NE(cq, nullptr) << ErrnoName(errno);
  ibv_wq_init_attr init = {};
  init.wq_type = IBV_WQT_RQ;
  init.max_wr = 4;
  init.max_sge = 1;
  init.pd = pd();
  init.cq = cq.get();
  errno = 0;
  ibv_wq* wq = ibv_create_wq(context(), &init);
  const int err = errno;
  EXPECT_EQ(wq, nullptr);
  if (wq != nullptr) ibv_destroy_wq(wq);
  EXPECT_EQ(err, EOPNOTSUPP) << ErrnoName(err);
}

}  // namespace
}  // namespace conformance
