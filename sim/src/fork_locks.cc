#include "fork_locks.h"

#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "device_list.h"
#include "fabric/fabric.h"
#include "transport/engine.h"

namespace simverbs {
namespace {

struct Leaf {
  void (*lock)();
  void (*unlock)();
};
Leaf leaves[kMaxForkLeaves];
std::atomic<int> leaf_count{0};  // entries below it are written
std::mutex leaves_mu;  // HoldAcrossFork's writers

// Two threads may fork at once: each fork takes this first and lets it go
// last, so one fork's Release never reads what another's Prepare writes.
std::mutex fork_mu;
// What Prepare took, for the release (fork_mu): an object made by another
// thread meanwhile was not locked.
Fabric* locked_fabric = nullptr;
DeviceList* locked_devices = nullptr;
Engine* locked_engine = nullptr;
int locked_leaves = 0;

void Prepare() {
  fork_mu.lock();
  locked_fabric = Fabric::IfMade();
  locked_devices = DeviceList::IfMade();
  locked_engine = Engine::IfMade();
  locked_leaves = leaf_count.load(std::memory_order_acquire);
  if (locked_fabric) locked_fabric->attach_mutex().lock();
  if (locked_devices) {
    for (const auto& device : locked_devices->devices()) device->contexts_mutex().lock();
  }
  if (locked_engine) locked_engine->mu().lock();
  if (locked_devices) {
    for (const auto& device : locked_devices->devices()) device->mutex().lock();
  }
  for (int i = 0; i < locked_leaves; ++i) leaves[i].lock();
}

void Release() {
  for (int i = locked_leaves - 1; i >= 0; --i) leaves[i].unlock();
  if (locked_devices) {
    for (const auto& device : locked_devices->devices()) device->mutex().unlock();
  }
  if (locked_engine) locked_engine->mu().unlock();
  if (locked_devices) {
    for (const auto& device : locked_devices->devices()) device->contexts_mutex().unlock();
  }
  if (locked_fabric) locked_fabric->attach_mutex().unlock();
  fork_mu.unlock();
}

const int registered = pthread_atfork(Prepare, Release, Release);

}  // namespace

void HoldAcrossFork(void (*lock)(), void (*unlock)()) {
  std::lock_guard<std::mutex> guard(leaves_mu);
  const int i = leaf_count.load(std::memory_order_relaxed);
  // More leaves than the table holds is a bug of the library, found by its tests.
  if (i >= kMaxForkLeaves) std::abort();
  leaves[i] = Leaf{lock, unlock};
  leaf_count.store(i + 1, std::memory_order_release);
}

}  // namespace simverbs
