// The fd-backed event queue behind completion channels and async_fd.

#include "event_queue.h"

#include <fcntl.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <future>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace simverbs {
namespace {

using namespace std::chrono_literals;

bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

QueuedEvent EventFor(void* element, std::atomic<uint32_t>* reported = nullptr) {
  QueuedEvent ev;
  ev.element = element;
  ev.reported = reported;
  return ev;
}

TEST(EventQueueTest, FdIsReadableExactlyWhileEventsAreQueued) {
  EventQueue q;
  int a = 0;
  EXPECT_FALSE(Readable(q.fd()));
  q.Push(EventFor(&a));
  q.Push(EventFor(&a));
  EXPECT_TRUE(Readable(q.fd()));
  QueuedEvent out;
  ASSERT_EQ(q.Pop(&out), 0);
  EXPECT_TRUE(Readable(q.fd()));
  ASSERT_EQ(q.Pop(&out), 0);
  EXPECT_FALSE(Readable(q.fd()));
  close(q.fd());
}

TEST(EventQueueTest, NonBlockingPopOfEmptyQueueIsEagain) {
  EventQueue q;
  SetNonBlocking(q.fd());
  QueuedEvent out;
  EXPECT_EQ(q.Pop(&out), EAGAIN);
  close(q.fd());
}

TEST(EventQueueTest, ReportedCountGrowsWhenHandedOutNotWhenQueued) {
  EventQueue q;
  std::atomic<uint32_t> reported{0};
  int a = 0;
  q.Push(EventFor(&a, &reported));
  EXPECT_EQ(reported.load(), 0u);
  QueuedEvent out;
  ASSERT_EQ(q.Pop(&out), 0);
  EXPECT_EQ(out.element, &a);
  EXPECT_EQ(reported.load(), 1u);
  close(q.fd());
}

TEST(EventQueueTest, BlockingPopWakesOnPush) {
  EventQueue q;
  int a = 0;
  auto popped = std::async(std::launch::async, [&] {
    QueuedEvent out;
    return q.Pop(&out) == 0 ? out.element : nullptr;
  });
  EXPECT_EQ(popped.wait_for(50ms), std::future_status::timeout) << "Pop returned with nothing queued";
  q.Push(EventFor(&a));
  ASSERT_EQ(popped.wait_for(5s), std::future_status::ready) << "Pop did not wake after Push";
  EXPECT_EQ(popped.get(), &a);
  close(q.fd());
}

TEST(EventQueueTest, PurgeDropsOnlyThatObjectsEvents) {
  EventQueue q;
  SetNonBlocking(q.fd());
  int a = 0, b = 0;
  q.Push(EventFor(&a));
  q.Push(EventFor(&b));
  q.Push(EventFor(&a));
  q.Purge(&a);
  QueuedEvent out;
  ASSERT_EQ(q.Pop(&out), 0);
  EXPECT_EQ(out.element, &b);
  EXPECT_EQ(q.Pop(&out), EAGAIN);
  EXPECT_FALSE(Readable(q.fd()));
  close(q.fd());
}

TEST(EventQueueTest, PurgeOfLastEventClearsReadiness) {
  EventQueue q;
  int a = 0;
  q.Push(EventFor(&a));
  q.Purge(&a);
  EXPECT_FALSE(Readable(q.fd()));
  close(q.fd());
}

TEST(EventQueueTest, ClosedQueueDeliversQueuedEventsThenEio) {
  EventQueue q;
  int a = 0;
  q.Push(EventFor(&a));
  q.Close();
  QueuedEvent out;
  EXPECT_EQ(q.Pop(&out), 0);
  EXPECT_EQ(q.Pop(&out), EIO);
  EXPECT_TRUE(Readable(q.fd())) << "a closed queue stays readable so waiters wake up";
  close(q.fd());
}

TEST(EventQueueTest, CloseWakesABlockedReaderWithEio) {
  EventQueue q;
  auto result = std::async(std::launch::async, [&] {
    QueuedEvent out;
    return q.Pop(&out);
  });
  EXPECT_EQ(result.wait_for(50ms), std::future_status::timeout);
  q.Close();
  ASSERT_EQ(result.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(result.get(), EIO);
  close(q.fd());
}

TEST(EventQueueTest, DestroyWakesABlockedReaderWithEio) {
  auto q = std::make_unique<EventQueue>();
  const int fd = q->fd();
  EventQueue* queue = q.get();
  auto result = std::async(std::launch::async, [queue] {
    QueuedEvent out;
    return queue->Pop(&out);
  });
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (queue->waiters() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_EQ(queue->waiters(), 1u) << "the reader never blocked";
  q.reset();  // returns once the reader has left the queue
  ASSERT_EQ(result.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(result.get(), EIO);
  close(fd);
}

TEST(EventQueueTest, EachEventGoesToExactlyOneOfSeveralReaders) {
  EventQueue q;
  constexpr int kThreads = 4;
  constexpr int kEventsEach = 50;
  std::vector<int> objects(kThreads * kEventsEach);
  std::vector<std::future<std::vector<void*>>> readers;
  for (int t = 0; t < kThreads; ++t) {
    readers.push_back(std::async(std::launch::async, [&] {
      std::vector<void*> got;
      for (int i = 0; i < kEventsEach; ++i) {
        QueuedEvent out;
        if (q.Pop(&out) == 0) got.push_back(out.element);
      }
      return got;
    }));
  }
  for (int& o : objects) q.Push(EventFor(&o));
  std::multiset<void*> all;
  for (auto& r : readers) {
    ASSERT_EQ(r.wait_for(10s), std::future_status::ready) << "a reader never got its events";
    for (void* e : r.get()) all.insert(e);
  }
  EXPECT_EQ(all.size(), objects.size());
  for (int& o : objects) EXPECT_EQ(all.count(&o), 1u) << "event delivered twice or lost";
  close(q.fd());
}

}  // namespace
}  // namespace simverbs
