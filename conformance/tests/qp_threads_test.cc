// Verbs from several threads at once on one context: threads that each drive
// their own RC pair while another QP's transport timer runs out, and a poster
// thread racing an event-loop thread (on the simulator: application threads,
// its timer thread and its fabric thread together).
// Portable; every wait is a bounded poll.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "conformance/lib/errno_capture.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_handles.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

constexpr int kLanes = 4;
constexpr int kMessages = 200;
// A requester with timeout 14 (67 ms) and retry_cnt 1 gives up well within this.
constexpr std::chrono::milliseconds kRetryWindow = 5000ms;

class QpThreadsTest : public QpTest {
 protected:
  // One thread's RC pair and buffers.
  struct Lane {
    QpEnd a;
    QpEnd b;
    Buffer send_buf;
    Buffer recv_buf;
  };

  void TearDown() override {
    for (Lane& lane : lanes_) {
      lane.a.reset();
      lane.b.reset();
      lane.send_buf = Buffer();
      lane.recv_buf = Buffer();
    }
    stuck_.reset();
    stuck_buf_ = Buffer();
    QpTest::TearDown();
  }

  // kMessages SENDs a -> b, one at a time, each carrying (lane, sequence).
  // Returns what went wrong, or an empty string.
  static std::string RunLane(Lane& lane, uint64_t lane_index) {
    for (uint64_t i = 0; i < kMessages; ++i) {
      const uint64_t value = lane_index << 32 | i;
      std::memcpy(lane.send_buf.data(), &value, sizeof value);
      ibv_sge rsge = lane.recv_buf.Sge(0, 8);
      if (PostRecv(lane.b.get(), i, &rsge, 1) != 0) return "ibv_post_recv " + std::to_string(i) + " failed";
      ibv_sge sge = lane.send_buf.Sge(0, 8);
      if (PostOne(lane.a.get(), SendWr(i, &sge, 1)) != 0) return "ibv_post_send " + std::to_string(i) + " failed";
      ibv_wc rwc = {};
      if (auto ok = PollOneCompletion(lane.b.recv_cq.get(), &rwc); !ok) return "receive " + std::to_string(i) + ": " + ok.message();
      if (rwc.status != IBV_WC_SUCCESS || rwc.wr_id != i) return "receive " + std::to_string(i) + ": " + DescribeWc(rwc);
      uint64_t got = 0;
      std::memcpy(&got, lane.recv_buf.data(), sizeof got);
      if (got != value) return "message " + std::to_string(i) + " arrived with another message's bytes";
      ibv_wc swc = {};
      if (auto ok = PollOneCompletion(lane.a.send_cq.get(), &swc); !ok) return "send " + std::to_string(i) + ": " + ok.message();
      if (swc.status != IBV_WC_SUCCESS || swc.wr_id != i) return "send " + std::to_string(i) + ": " + DescribeWc(swc);
    }
    return "";
  }

  std::array<Lane, kLanes> lanes_;
  QpEnd stuck_;
  Buffer stuck_buf_;
};

// Rule: ibv_create_cq_ex(3): IBV_CREATE_CQ_ATTR_SINGLE_THREADED "This CQ is used from a single threaded,
//   thus no locking is required" - without it verbs on one context may be called from several threads at
//   once; ibv_post_send(3) / ibv_poll_cq(3): each QP's work requests complete in order, whatever other
//   QPs do; IBTA Vol 1 ch. 9 (transport timer): a requester with no answer completes with
//   IBV_WC_RETRY_EXC_ERR after retry_cnt retries.
// Checks: 4 threads, each with its own RC pair on the fixture's context, each send 200 signaled 8-byte
//   SENDs one at a time: every SEND and receive completes with IBV_WC_SUCCESS and the expected wr_id, and
//   each receive holds the bytes of its own SEND; meanwhile a fifth QP connected to a QP number that does
//   not exist (timeout 14, retry_cnt 1) completes its WRITE with IBV_WC_RETRY_EXC_ERR within 5 s.
TEST_F(QpThreadsTest, ConcurrentPairsCompleteInOrder_WhileTimerExpires) {
  for (Lane& lane : lanes_) {
    ASSERT_TRUE(CreateEnd(&lane.a));
    ASSERT_TRUE(CreateEnd(&lane.b));
    ASSERT_TRUE(Connect(lane.a, lane.b));
    ASSERT_TRUE(lane.send_buf.Register(pd(), 64));
    ASSERT_TRUE(lane.recv_buf.Register(pd(), 64));
  }
  ASSERT_TRUE(CreateEnd(&stuck_));
  ConnectParams params;
  params.timeout = 14;
  params.retry_cnt = 1;
  params.path_mtu = DefaultMtu();
  const uint32_t nobody = (stuck_.qp_num() ^ 0x5a5a00) & 0xffffff;
  ASSERT_TRUE(BringUp(stuck_.get(), port(), nobody, LocalAddress(), params));
  // Its own buffer: the retransmissions read it while the lanes run.
  ASSERT_TRUE(stuck_buf_.Register(pd(), 64));
  ibv_sge sge = stuck_buf_.Sge(0, 8);
  ASSERT_EQ(PostOne(stuck_.get(), RdmaWr(7, IBV_WR_RDMA_WRITE, &sge, 1, stuck_buf_.addr(32), stuck_buf_.rkey())), 0);

  std::array<std::string, kLanes> errors;
  std::vector<std::thread> threads;
  for (int i = 0; i < kLanes; ++i) {
    threads.emplace_back([this, &errors, i] { errors[i] = RunLane(lanes_[i], static_cast<uint64_t>(i)); });
  }
  ibv_wc wc = {};
  const testing::AssertionResult stuck_completed = PollOneCompletion(stuck_.send_cq.get(), &wc, kRetryWindow);
  for (std::thread& t : threads) t.join();

  for (int i = 0; i < kLanes; ++i) EXPECT_EQ(errors[i], "") << "lane " << i;
  ASSERT_TRUE(stuck_completed);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << DescribeWc(wc);
}

// Rule: ibv_get_cq_event(3): the stage II loop "Wait for the completion event and ack it", "Request for
//   notification upon the next completion event", "Empty the CQ" - run on its own thread while another
//   thread posts; ibv_req_notify_cq(3): a new CQE on an armed CQ adds a completion event to its channel.
// Checks: one thread posts 200 SENDs a_ -> b_ (each once the previous one's send completion is polled)
//   while another runs the stage II loop on b_'s receive CQ (each wait bounded by 2 s): the loop sees all
//   200 receives, in order, each with IBV_WC_SUCCESS, and no wait runs out.
TEST_F(QpThreadsTest, EventLoopThreadSeesEveryCompletion_WhilePosterThreadSends) {
  channel_.reset(ibv_create_comp_channel(context()));
  ASSERT_NE(channel_, nullptr) << ErrnoName(errno);
  EndConfig b_config;
  b_config.recv_channel = channel_.get();
  b_config.caps.max_recv_wr = kMessages;
  b_config.recv_cqe = kMessages;
  ASSERT_TRUE(MakePair(EndConfig{}, b_config, ConnectParams{}, ConnectParams{}));
  Buffer send_buf;
  Buffer recv_buf;
  ASSERT_TRUE(send_buf.Register(pd(), 64));
  ASSERT_TRUE(recv_buf.Register(pd(), 64));
  for (int i = 0; i < kMessages; ++i) {
    ibv_sge rsge = recv_buf.Sge(0, 8);
    ASSERT_EQ(PostRecv(b_.get(), static_cast<uint64_t>(i), &rsge, 1), 0) << "receive " << i;
  }
  ibv_cq* cq = b_.recv_cq.get();
  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);

  std::string loop_error;
  std::vector<uint64_t> received;
  std::thread loop([&] {
    while (received.size() < static_cast<size_t>(kMessages)) {
      ibv_cq* ev_cq = nullptr;
      void* ev_ctx = nullptr;
      if (auto ok = GetCqEventWithin(channel_.get(), &ev_cq, &ev_ctx, kReturnWindow); !ok) {
        loop_error = "after " + std::to_string(received.size()) + " receives: " + ok.message();
        return;
      }
      ibv_ack_cq_events(ev_cq, 1);
      if (ibv_req_notify_cq(ev_cq, 0) != 0) {
        loop_error = "ibv_req_notify_cq failed";
        return;
      }
      ibv_wc wc = {};
      for (int n; (n = ibv_poll_cq(ev_cq, 1, &wc)) != 0;) {
        if (n < 0 || wc.status != IBV_WC_SUCCESS) {
          loop_error = "poll: " + std::to_string(n) + " " + DescribeWc(wc);
          return;
        }
        received.push_back(wc.wr_id);
      }
    }
  });
  std::string post_error;
  for (int i = 0; i < kMessages && post_error.empty(); ++i) {
    ibv_sge sge = send_buf.Sge(0, 8);
    ibv_wc swc = {};
    if (PostOne(a_.get(), SendWr(static_cast<uint64_t>(i), &sge, 1)) != 0) {
      post_error = "ibv_post_send " + std::to_string(i) + " failed";
    } else if (auto ok = PollOneCompletion(a_.send_cq.get(), &swc); !ok) {
      post_error = "send " + std::to_string(i) + ": " + ok.message();
    } else if (swc.status != IBV_WC_SUCCESS) {
      post_error = "send " + std::to_string(i) + ": " + DescribeWc(swc);
    }
  }
  loop.join();

  EXPECT_EQ(post_error, "");
  EXPECT_EQ(loop_error, "");
  ASSERT_EQ(received.size(), static_cast<size_t>(kMessages));
  for (int i = 0; i < kMessages; ++i) EXPECT_EQ(received[i], static_cast<uint64_t>(i)) << "receive " << i;
}

// Rule: exit(3) calls the functions registered with atexit(3) while the program's other threads
//   still run; nothing in ibv_poll_cq(3) or ibv_close_device(3) asks a program to stop polling
//   before it exits, and the process ends with the status given to exit.
// Checks: a child process opens the device, starts 4 threads that poll a CQ without pause, and
//   calls exit(0) once each has polled: the child exits with status 0 (it is not killed by a
//   signal), in each of 30 rounds.
TEST_F(QpThreadsTest, ExitWhileAnotherThreadPollsEndsWithItsStatus) {
  // The race with exit is short: a few rounds give it room.
  for (int round = 0; round < 30; ++round) {
    const ChildResult result = RunInChild(
        [&]() -> int {
          ContextPtr context = OpenAnotherContext();  // this process joins the fabric itself
          if (!context) return 2;
          ibv_cq* cq = ibv_create_cq(context.get(), 4, nullptr, nullptr, 0);
          if (!cq) return 3;
          static std::atomic<int> polling{0};
          for (int i = 0; i < 4; ++i) {
            std::thread([cq] {
              ibv_wc wc;
              bool counted = false;
              for (;;) {
                ibv_poll_cq(cq, 1, &wc);
                if (!counted) ++polling;
                counted = true;
              }
            }).detach();
          }
          while (polling < 4) std::this_thread::yield();
          std::exit(0);
        },
        kChildTimeout, "exit(0) while a thread polls");
    if (!result.ok()) {
      EXPECT_TRUE(Passed(result)) << "round " << round;
      break;
    }
  }
}

// Rule: signal(7): a process-directed signal is delivered to a thread that does not block it, and
//   stays pending while every thread blocks it; libibverbs starts no thread of its own (rdma-core's
//   providers run in the caller's threads), so the program's signal mask decides alone where its
//   handlers run.
// Checks: a child process opens the device, creates a CQ and an RC QP, blocks SIGTERM in its only
//   thread, installs a handler that records the thread it runs on and calls exit(3), then sends
//   itself SIGTERM: within kBlockWindow the handler has not run and SIGTERM is pending; once the
//   thread unblocks it, the handler runs on that thread and the child exits with status 3 (it was
//   killed by SIGABRT when exit ran on a thread of the library).
TEST_F(QpThreadsTest, SignalBlockedByTheProgramStaysPending) {
  const ChildResult result = RunInChild(
      [&]() -> int {
        ContextPtr context = OpenAnotherContext();  // this process joins the fabric itself
        if (!context) return 10;
        ibv_pd* pd = ibv_alloc_pd(context.get());
        ibv_cq* cq = pd ? ibv_create_cq(context.get(), 4, nullptr, nullptr, 0) : nullptr;
        if (!cq) return 11;
        ibv_qp_init_attr init = {};
        init.send_cq = cq;
        init.recv_cq = cq;
        init.cap = {4, 4, 1, 1, 0};
        init.qp_type = IBV_QPT_RC;
        if (!ibv_create_qp(pd, &init)) return 12;
        static pthread_t main_thread;
        main_thread = pthread_self();
        // exit(3) where it runs; 4 if that is not this thread (the exit status says which).
        signal(SIGTERM, [](int) { std::exit(pthread_equal(pthread_self(), main_thread) ? 3 : 4); });
        sigset_t term;
        sigemptyset(&term);
        sigaddset(&term, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &term, nullptr);
        kill(getpid(), SIGTERM);
        const auto until = std::chrono::steady_clock::now() + kBlockWindow;
        sigset_t pending;
        do {
          sigpending(&pending);
          if (!sigismember(&pending, SIGTERM)) return 13;  // taken by a thread that is not ours
          std::this_thread::yield();
        } while (std::chrono::steady_clock::now() < until);
        pthread_sigmask(SIG_UNBLOCK, &term, nullptr);  // the handler runs here and exits
        return 14;
      },
      kChildTimeout, "SIGTERM blocked in the program's thread");
  ASSERT_EQ(result.status, ChildResult::Status::kExited) << result.Describe();
  EXPECT_EQ(result.exit_code, 3) << "13: SIGTERM was no longer pending while the program blocked it; 4: the "
                                    "handler ran on another thread; 14: it never ran; 10-12: set-up failed";
}

// Rule: ibv_open_device(3) may be called from several threads at once (libibverbs is thread safe,
//   libibverbs/man/ibv_open_device.3 and the verbs thread-safety note in ibv_create_qp(3)); each call
//   returns its own context.
// Checks: in a fresh child process, 4 threads released together each call ibv_open_device on the
//   device: every call returns a context, in each of 20 rounds.
TEST_F(QpThreadsTest, ConcurrentOpenDeviceReturnsAContextEach) {
  for (int round = 0; round < 20; ++round) {
    const ChildResult result = RunInChild(
        [&]() -> int {
          std::atomic<int> ready{0};
          std::atomic<int> opened{0};
          std::vector<std::thread> threads;
          for (int i = 0; i < 4; ++i) {
            threads.emplace_back([&] {
              ++ready;
              while (ready < 4) std::this_thread::yield();
              ContextPtr context = OpenAnotherContext();
              if (context) ++opened;
            });
          }
          for (std::thread& t : threads) t.join();
          return opened == 4 ? 0 : 1;
        },
        kChildTimeout, "4 threads in ibv_open_device");
    if (!result.ok()) {
      EXPECT_TRUE(Passed(result)) << "round " << round;
      break;
    }
  }
}

// Rule: fork(2) in a multithreaded program: the child runs only the thread that forked; a library must
//   not leave a child holding a lock that another thread of the parent held at the fork, so a child of
//   fork() opens the device and uses it whatever the parent's other threads were doing with it.
//   (libibverbs' ibv_get_device_list holds a process-wide lock while it reads sysfs: a child that asks
//   for the list while another thread of the parent was doing so waits for ever; so the device here
//   comes from a list fetched before.)
// Checks: while another thread opens and closes contexts of the device and makes and destroys a PD and
//   a CQ on them in a loop, 40 children of fork() in turn each open a context of it and allocate a PD
//   (each within a 3 s watchdog).
TEST_F(QpThreadsTest, ChildOfForkOpensTheDeviceWhileAnotherThreadUsesIt) {
  // (Seen: a child's progress thread waiting for ever on a lock of libasan's allocator, which the
  // parent's other thread held at the fork.)
  SKIP_IF(kAddressSanitizedBuild) << "(AddressSanitizer's allocator is not fork-safe while another thread allocates)";
  ibv_device* device = context()->device;
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop.load()) {
      ContextPtr context(ibv_open_device(device));
      if (!context) continue;
      PdPtr pd(ibv_alloc_pd(context.get()));
      CqPtr cq(ibv_create_cq(context.get(), 4, nullptr, nullptr, 0));
    }
  });
  for (int child = 0; child < 40; ++child) {
    const ChildResult result = RunInChild(
        [&]() -> int {
          ContextPtr context(ibv_open_device(device));
          if (!context) return 1;
          PdPtr pd(ibv_alloc_pd(context.get()));
          return pd ? 0 : 2;
        },
        3000ms, "a child of fork() opening the device (1: no context, 2: no PD)");
    if (!result.ok()) {
      EXPECT_TRUE(Passed(result)) << "child " << child;
      break;
    }
  }
  stop = true;
  busy.join();
}

}  // namespace
}  // namespace conformance
