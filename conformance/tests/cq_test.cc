// Completion queues: create, resize, poll, arm, and the extended CQ.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_handles.h"
#include "conformance/lib/verbs_matchers.h"
#include "conformance/lib/verbs_test.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

class CqTest : public VerbsTest {};

// The bytes of address space the process has mapped (/proc/self/statm, in
// pages), or 0 when that cannot be read.
size_t AddressSpaceInUse() {
  char buf[128] = {};
  const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  return static_cast<size_t>(std::strtoull(buf, nullptr, 10)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Rule: ibv_create_cq(3): "creates a completion queue (CQ) with at least cqe entries ... The
//   pointer cq_context will be used to set user context pointer of the CQ structure. The
//   argument channel is optional".
// Checks: cqe 1 works; the CQ has cqe >= 1, its context, the given cq_context and no channel.
TEST_F(CqTest, CreateSucceeds_OneCqe) {
  int marker = 0;
  auto call = CaptureErrno([&] { return ibv_create_cq(context(), 1, &marker, nullptr, 0); });
  ASSERT_THAT(call, ReturnsObject());
  EXPECT_GE(call.ptr->cqe, 1);
  EXPECT_EQ(call.ptr->context, context());
  EXPECT_EQ(call.ptr->cq_context, &marker);
  EXPECT_EQ(call.ptr->channel, nullptr);
}

// Rule: ibv_query_device(3): max_cqe is the "Maximum number of CQE capacity per CQ";
//   ibv_create_cq(3): "may create a CQ with size greater than or equal to the requested size".
// Checks: a CQ of max_cqe entries can be created and reports cqe >= max_cqe.
TEST_F(CqTest, CreateSucceeds_MaxCqe) {
  SKIP_IF(!Backend().Answer("MaxCqeCqCreatable", true)) << "(host memory limits apply, see ibv_query_device(3))";
  const int max_cqe = device_attr().max_cqe;
  auto call = CaptureErrno([&] { return ibv_create_cq(context(), max_cqe, nullptr, nullptr, 0); });
  ASSERT_THAT(call, ReturnsObject());
  EXPECT_GE(call.ptr->cqe, max_cqe);
}

// Rule: ibv_create_cq(3): "returns a pointer to the CQ, or NULL if the request fails"; a CQ's ring
//   is memory of the process (the provider's buffer, or the kernel's queue mapped into it), so when
//   the process may map nothing more (setrlimit(2) RLIMIT_AS) the request fails with ENOMEM and the
//   program goes on.
// Checks: in a child whose RLIMIT_AS is lowered to the address space it already has, CQs of
//   max_cqe entries are created until one fails (at most 64, so heap already free is used up): that
//   ibv_create_cq returns NULL with errno ENOMEM, and the child lives to report it.
TEST_F(CqTest, CreateFails_AddressSpaceExhausted) {
  SKIP_IF(kSanitizedBuild) << "(a sanitizer's allocator aborts when memory runs out, whatever the library does)";
  const int max_cqe = device_attr().max_cqe;
  constexpr size_t kTries = 64;
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        rlimit saved = {};
        ASSERT_EQ(getrlimit(RLIMIT_AS, &saved), 0);
        const size_t in_use = AddressSpaceInUse();
        ASSERT_GT(in_use, 0u);
        std::vector<ibv_cq*> made;
        made.reserve(kTries);
        rlimit tight = saved;
        tight.rlim_cur = in_use;
        ASSERT_EQ(setrlimit(RLIMIT_AS, &tight), 0);
        int err = 0;
        bool failed = false;
        while (!failed && made.size() < kTries) {
          errno = 0;
          ibv_cq* cq = ibv_create_cq(context.get(), max_cqe, nullptr, nullptr, 0);
          if (cq) {
            made.push_back(cq);
          } else {
            failed = true;
            err = errno;
          }
        }
        // Reporting a check allocates: the limit goes first.
        setrlimit(RLIMIT_AS, &saved);
        for (ibv_cq* cq : made) EXPECT_EQ(ibv_destroy_cq(cq), 0);
        EXPECT_TRUE(failed) << made.size() << " CQs of " << max_cqe << " entries were created with RLIMIT_AS at "
                            << in_use << " bytes";
        if (failed) {
          EXPECT_EQ(err, ENOMEM) << ErrnoName(err);
        }
      },
      kChildTimeout, "ibv_create_cq with RLIMIT_AS at the address space in use");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_create_cq(3): "creates a completion queue (CQ) with at least cqe entries"; IBTA Vol 1
//   ch. 11 (Create Completion Queue): the requested size must be at least one entry and at most
//   the HCA's maximum, else the verb fails (Invalid CQ size).
// Checks: cqe 0 returns NULL with errno EINVAL.
TEST_F(CqTest, CreateFails_ZeroCqe) {
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_cq(context(), 0, nullptr, nullptr, 0); }),
              ReturnsNullWithErrno(EINVAL));
}

// Rule: ibv_create_cq(3): "creates a completion queue (CQ) with at least cqe entries"; a negative
//   size is no size (IBTA Vol 1 ch. 11, Create Completion Queue: Invalid CQ size).
// Checks: cqe -1 and INT_MIN return NULL with errno EINVAL.
TEST_F(CqTest, CreateFails_NegativeCqe) {
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_cq(context(), -1, nullptr, nullptr, 0); }),
              ReturnsNullWithErrno(EINVAL));
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_cq(context(), INT_MIN, nullptr, nullptr, 0); }),
              ReturnsNullWithErrno(EINVAL));
}

// Rule: ibv_query_device(3): max_cqe is the "Maximum number of CQE capacity per CQ"; IBTA Vol 1
//   ch. 11 (Create Completion Queue): a size above the HCA's maximum fails (Invalid CQ size).
// Checks: cqe max_cqe + 1 returns NULL with errno EINVAL.
TEST_F(CqTest, CreateFails_CqeAboveMax) {
  SKIP_IF(device_attr().max_cqe == INT_MAX);
  const int cqe = device_attr().max_cqe + 1;
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_cq(context(), cqe, nullptr, nullptr, 0); }),
              ReturnsNullWithErrno(EINVAL));
}

// Rule: ibv_create_cq(3): "The CQ will use the completion vector comp_vector for signaling
//   completion events; it must be at least zero and less than context->num_comp_vectors."
// Checks: comp_vector num_comp_vectors and -1 return NULL with errno EINVAL, while
//   num_comp_vectors - 1 works.
TEST_F(CqTest, CreateFails_CompVectorOutOfRange) {
  const int vectors = context()->num_comp_vectors;
  ASSERT_GT(vectors, 0) << "num_comp_vectors";
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_cq(context(), 1, nullptr, nullptr, vectors); }),
              ReturnsNullWithErrno(EINVAL));
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_cq(context(), 1, nullptr, nullptr, -1); }),
              ReturnsNullWithErrno(EINVAL));
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_cq(context(), 1, nullptr, nullptr, vectors - 1); }),
              ReturnsObject());
}

// Rule: ibv_poll_cq(3): "On success, ibv_poll_cq() returns a non-negative value equal to the
//   number of completions found."
// Checks: polling a new CQ for 4 entries returns 0 and writes no completion.
TEST_F(CqTest, PollEmptyReturnsZero) {
  CqPtr cq(ibv_create_cq(context(), 4, nullptr, nullptr, 0));
  ASSERT_NE(cq, nullptr) << ErrnoName(errno);
  ibv_wc wc[4];
  for (ibv_wc& w : wc) w.wr_id = 0x5a5a5a5a;
  EXPECT_EQ(ibv_poll_cq(cq.get(), 4, wc), 0);
  EXPECT_EQ(wc[0].wr_id, 0x5a5a5a5au) << "an empty poll wrote a work completion";
}

// Rule: ibv_resize_cq(3): "resizes the completion queue (CQ) cq to have at least cqe entries ...
//   returns 0 on success ... The cqe member of cq will be updated to the actual size."
// Checks: growing a 4-entry CQ to 64 (or max_cqe if smaller) returns 0 and cq->cqe >= the new
//   size.
TEST_F(CqTest, ResizeGrowsCqe) {
  SKIP_IF(!Backend().Answer("ResizeCqSupported", true)) << "(the provider has no resize_cq)";
  CqPtr cq(ibv_create_cq(context(), 4, nullptr, nullptr, 0));
  ASSERT_NE(cq, nullptr) << ErrnoName(errno);
  const int wanted = std::min(64, device_attr().max_cqe);
  SKIP_IF(wanted <= cq->cqe) << "(the CQ is already that large)";
  EXPECT_EQ(ibv_resize_cq(cq.get(), wanted), 0);
  EXPECT_GE(cq->cqe, wanted);
}

// Rule: ibv_create_cq(3): "creates a completion queue (CQ) with at least cqe entries";
//   ibv_resize_cq(3): "The cqe member of cq will be updated to the actual size." How much larger
//   the actual size is, is the provider's choice (CqSizeRoundedToPow2Minus1: rxe sizes its ring to
//   the next power of two above cqe and reports one entry less, drivers/infiniband/sw/rxe/
//   rxe_queue.c: rxe_queue_init).
// Checks: cqe 5 gives cq->cqe 5 (7 where the backend rounds); resizing to 9 gives 9 (15).
TEST_F(CqTest, ActualSizeFollowsBackend) {
  const bool pow2 = Backend().Answer("CqSizeRoundedToPow2Minus1", false);
  CqPtr cq(ibv_create_cq(context(), 5, nullptr, nullptr, 0));
  ASSERT_NE(cq, nullptr) << ErrnoName(errno);
  EXPECT_EQ(cq->cqe, pow2 ? 7 : 5);
  SKIP_IF(!Backend().Answer("ResizeCqSupported", true)) << "(the provider has no resize_cq)";
  ASSERT_EQ(ibv_resize_cq(cq.get(), 9), 0);
  EXPECT_EQ(cq->cqe, pow2 ? 15 : 9);
}

// Rule: ibv_resize_cq(3): "returns 0 on success, or the value of errno on failure"; a CQ must
//   have at least one entry (IBTA Vol 1 ch. 11, Resize Completion Queue: Invalid CQ size).
// Checks: resizing to 0 returns a non-zero errno value and leaves cq->cqe unchanged.
TEST_F(CqTest, ResizeFails_ZeroCqe) {
  CqPtr cq(ibv_create_cq(context(), 4, nullptr, nullptr, 0));
  ASSERT_NE(cq, nullptr) << ErrnoName(errno);
  const int before = cq->cqe;
  EXPECT_THAT(ibv_resize_cq(cq.get(), 0), ::testing::Gt(0));
  EXPECT_EQ(cq->cqe, before);
}

// Rule: ibv_create_cq_ex(3): wc_flags are "The wc_flags that should be returned in
//   ibv_poll_cq_ex. Or'ed bit of enum ibv_wc_flags_ex"; a provider refuses flags it cannot
//   honour with EOPNOTSUPP (libibverbs' extended-verb convention).
// Checks: a wc_flags bit no enum value defines returns NULL with errno EOPNOTSUPP.
TEST_F(CqTest, CreateCqExFails_UnsupportedWcFlag) {
  ibv_cq_init_attr_ex attr = {};
  attr.cqe = 4;
  attr.wc_flags = 1ull << 62;
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_cq_ex(context(), &attr); }), ReturnsNullWithErrno(EOPNOTSUPP));
}

// Rule: ibv_create_cq_ex(3): wc_flags are "Or'ed bit of enum ibv_wc_flags_ex"; which of them a
//   provider can fill is its own: rxe takes BYTE_LEN, IMM, QP_NUM, SRC_QP, SLID, SL and
//   DLID_PATH_BITS only (providers/rxe/rxe.c: RXE_SUP_WC_EX_FLAGS, EOPNOTSUPP otherwise), mlx5 also
//   CVLAN, FLOW_TAG and TM_INFO. The backend's choice is CreateCqExTakesVendorWcFlags.
// Checks: a CQ asking for all seven of rxe's fields is created; one asking for CVLAN, FLOW_TAG or
//   TM_INFO as well is created on a backend that takes them, else NULL with errno EOPNOTSUPP.
TEST_F(CqTest, CreateCqExVendorWcFlagsFollowBackend) {
  SKIP_IF(!Backend().Answer("CreateCqExSupported", true)) << "(the provider has no create_cq_ex)";
  const bool takes = Backend().Answer("CreateCqExTakesVendorWcFlags", true);
  constexpr uint64_t kIbFields = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                                 IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                                 IBV_WC_EX_WITH_DLID_PATH_BITS;
  for (const uint64_t extra : {uint64_t{0}, uint64_t{IBV_WC_EX_WITH_CVLAN}, uint64_t{IBV_WC_EX_WITH_FLOW_TAG},
                               uint64_t{IBV_WC_EX_WITH_TM_INFO}}) {
    SCOPED_TRACE("wc_flags " + std::to_string(kIbFields | extra));
    ibv_cq_init_attr_ex attr = {};
    attr.cqe = 4;
    attr.wc_flags = kIbFields | extra;
    errno = 0;
    ibv_cq_ex* cq = ibv_create_cq_ex(context(), &attr);
    if (extra == 0 || takes) {
      ASSERT_NE(cq, nullptr) << ErrnoName(errno);
      EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
    } else {
      EXPECT_EQ(cq, nullptr);
      EXPECT_EQ(errno, EOPNOTSUPP) << ErrnoName(errno);
      if (cq) ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
    }
  }
}

// Rule: ibv_create_cq_ex(3): IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN is a flag a device may not support;
//   libibverbs passes it to the kernel (cmd_cq.c: IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN), whose rxe
//   driver takes no CQ flags (backend question IgnoreOverrunSupported).
// Checks: (a backend without it) a CQ asking for IGNORE_OVERRUN returns NULL with errno EOPNOTSUPP.
TEST_F(CqTest, CreateCqExFails_IgnoreOverrunWhereUnsupported) {
  SKIP_IF(!Backend().Answer("CreateCqExSupported", true)) << "(the provider has no create_cq_ex)";
  SKIP_IF(Backend().Answer("IgnoreOverrunSupported", true)) << "(the backend takes IGNORE_OVERRUN)";
  ibv_cq_init_attr_ex attr = {};
  attr.cqe = 4;
  attr.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
  attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  attr.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_cq_ex(context(), &attr); }), ReturnsNullWithErrno(EOPNOTSUPP));
}

// Rule: ibv_create_cq_ex(3): ibv_start_poll: "When no completions are available on the CQ,
//   ENOENT is returned, but the CQ remains in a valid state ... If an error code is given,
//   end_poll shouldn't be called."
// Checks: an extended CQ with IBV_WC_EX_WITH_BYTE_LEN is created with cqe >= 4, and start_poll
//   on it returns ENOENT twice in a row.
TEST_F(CqTest, StartPollEmptyReturnsEnoent) {
  SKIP_IF(!Backend().Answer("CreateCqExSupported", true)) << "(the provider has no create_cq_ex)";
  ibv_cq_init_attr_ex attr = {};
  attr.cqe = 4;
  attr.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
  auto call = CaptureErrno([&] { return ibv_create_cq_ex(context(), &attr); });
  ASSERT_THAT(call, ReturnsObject());
  EXPECT_GE(call.ptr->cqe, 4);
  ibv_poll_cq_attr poll_attr = {};
  EXPECT_THAT(ibv_start_poll(call.ptr.get(), &poll_attr), ReturnsErrno(ENOENT));
  EXPECT_THAT(ibv_start_poll(call.ptr.get(), &poll_attr), ReturnsErrno(ENOENT)) << "the CQ did not stay valid";
}

// Rule: ibv_req_notify_cq(3): "requests a completion notification on the completion queue (CQ)
//   cq ... returns 0 on success".
// Checks: arming a CQ that has a completion channel for any completion returns 0.
TEST_F(CqTest, ReqNotifySucceeds_AnyCompletion) {
  ChannelPtr channel(ibv_create_comp_channel(context()));
  ASSERT_NE(channel, nullptr) << ErrnoName(errno);
  CqPtr cq(ibv_create_cq(context(), 4, nullptr, channel.get(), 0));
  ASSERT_NE(cq, nullptr) << ErrnoName(errno);
  EXPECT_EQ(ibv_req_notify_cq(cq.get(), 0), 0);
}

// Rule: ibv_req_notify_cq(3): "If solicited_only is non-zero, an event is only generated for a
//   new CQE with that is considered solicited ... returns 0 on success".
// Checks: arming for solicited completions returns 0, also on an already armed CQ.
TEST_F(CqTest, ReqNotifySucceeds_SolicitedOnly) {
  ChannelPtr channel(ibv_create_comp_channel(context()));
  ASSERT_NE(channel, nullptr) << ErrnoName(errno);
  CqPtr cq(ibv_create_cq(context(), 4, nullptr, channel.get(), 0));
  ASSERT_NE(cq, nullptr) << ErrnoName(errno);
  EXPECT_EQ(ibv_req_notify_cq(cq.get(), 1), 0);
  EXPECT_EQ(ibv_req_notify_cq(cq.get(), 1), 0);
}

// Rule: ibv_create_cq(3): "The argument channel is optional"; ibv_req_notify_cq(3) does not say
//   what arming a CQ without a channel does, so the backend answers
//   ReqNotifyWithoutChannelSucceeds (spec default: true, the request itself is valid).
// Checks: ibv_req_notify_cq on a CQ without a channel returns 0 when the answer is true, an
//   errno value otherwise.
TEST_F(CqTest, ReqNotify_WithoutChannel) {
  CqPtr cq(ibv_create_cq(context(), 4, nullptr, nullptr, 0));
  ASSERT_NE(cq, nullptr) << ErrnoName(errno);
  if (Backend().Answer("ReqNotifyWithoutChannelSucceeds", true)) {
    EXPECT_EQ(ibv_req_notify_cq(cq.get(), 0), 0);
  } else {
    EXPECT_GT(ibv_req_notify_cq(cq.get(), 0), 0);
  }
}

}  // namespace
}  // namespace conformance
