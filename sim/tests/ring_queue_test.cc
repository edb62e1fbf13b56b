// The work queues' FIFO (ring_queue.h): entries leave in the order they came,
// across wrap-around and growth and with entries put back at the front, and a
// slot handed out again still holds its last entry's buffer (posting reuses
// its capacity instead of allocating).

#include "ring_queue.h"

#include <cstddef>
#include <new>
#include <vector>

#include "gtest/gtest.h"

namespace simverbs {
namespace {

struct Entry {
  int id = 0;
  std::vector<int> buffer;
};

void Push(RingQueue<Entry>* q, int id) {
  Entry& slot = q->push_back_slot();
  slot.id = id;
  slot.buffer.assign(4, id);
}

std::vector<int> Ids(const RingQueue<Entry>& q) {
  std::vector<int> ids;
  for (const Entry& e : q) ids.push_back(e.id);
  return ids;
}

// Rule: a work queue completes in posting order (ibv_post_send(3), ibv_post_recv(3)).
// Checks: 100 pushes with pops in between (the array wraps and grows from 16) come out in order,
//   both by front()/pop_front() and by iteration; size() follows.
TEST(RingQueueTest, FifoAcrossWrapAndGrowth) {
  RingQueue<Entry> q;
  int next_out = 0;
  for (int id = 0; id < 100; ++id) {
    Push(&q, id);
    if (id % 3 == 2) {  // two in, one out: the queue fills while its head moves
      EXPECT_EQ(q.front().id, next_out++);
      q.pop_front();
    }
  }
  std::vector<int> want;
  for (int id = next_out; id < 100; ++id) want.push_back(id);
  EXPECT_EQ(Ids(q), want);
  EXPECT_EQ(q.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(q[i].id, want[i]);
  EXPECT_EQ(q.back().id, 99);
}

// Rule: rxe keeps the receive WQE of a dropped UC message for the next message: it goes back to the
//   front of the queue.
// Checks: an entry put back with push_front_slot leaves first, the others after it in order, also
//   when the head is at slot 0 (the new head wraps to the end of the array).
TEST(RingQueueTest, PutBackEntryLeavesFirst) {
  RingQueue<Entry> q;
  for (int id = 1; id <= 3; ++id) Push(&q, id);
  q.push_front_slot().id = 0;
  EXPECT_EQ(Ids(q), (std::vector<int>{0, 1, 2, 3}));
  q.pop_front();
  q.pop_front();
  q.push_front_slot().id = 10;
  EXPECT_EQ(Ids(q), (std::vector<int>{10, 2, 3}));
}

// Rule: (simulator) putting a receive back takes no memory: ibv_post_recv(3) keeps a slot spare
//   (reserve), and an allocation that fails there fails the post with ENOMEM, not a later put-back.
// Checks: reserve on a queue that has wrapped keeps its entries in order and gives at least the
//   capacity asked for; pushes at either end up to that size leave the capacity as it was.
TEST(RingQueueTest, ReservedRoomTakesPushesWithoutGrowing) {
  RingQueue<Entry> q;
  for (int id = 0; id < 12; ++id) Push(&q, id);
  for (int k = 0; k < 10; ++k) q.pop_front();
  for (int id = 12; id < 26; ++id) Push(&q, id);  // 16 entries, the head at slot 10
  ASSERT_EQ(q.capacity(), 16u);
  q.reserve(q.size() + 2);
  const size_t reserved = q.capacity();
  EXPECT_GE(reserved, 18u);
  std::vector<int> want;
  for (int id = 10; id < 26; ++id) want.push_back(id);
  EXPECT_EQ(Ids(q), want);
  Push(&q, 26);
  q.push_front_slot().id = 9;
  EXPECT_EQ(q.capacity(), reserved);
  want.insert(want.begin(), 9);
  want.push_back(26);
  EXPECT_EQ(Ids(q), want);
  q.reserve(4);  // less than it has: nothing changes
  EXPECT_EQ(q.capacity(), reserved);
}

// Rule: (simulator) posting allocates nothing in steady state: a slot is reused with its buffer.
// Checks: after an entry with a 4-element buffer leaves and the array comes round, the slot handed
//   out for a new entry at the same place still has that buffer's capacity; a slot whose filling
//   throws (push_back_filled) is taken back and the queue stays empty.
TEST(RingQueueTest, ReusedSlotKeepsItsBuffer) {
  RingQueue<Entry> q;
  for (int id = 0; id < 16; ++id) {
    Push(&q, id);
    q.pop_front();
  }
  bool filled = false;
  const auto fill_and_fail = [&](Entry& slot) {  // the array's first slot again
    EXPECT_EQ(slot.id, 0);
    EXPECT_GE(slot.buffer.capacity(), 4u);
    filled = true;
    throw std::bad_alloc();
  };
  EXPECT_THROW(q.push_back_filled(fill_and_fail), std::bad_alloc);
  EXPECT_TRUE(filled);
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace simverbs
