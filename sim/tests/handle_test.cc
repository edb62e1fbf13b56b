// Handles: a pointer that is not (or no longer) one of ours is refused.

#include "handle.h"

#include <cstdint>
#include <new>

#include "gtest/gtest.h"

namespace simverbs {
namespace {

struct Public {
  int field = 0;
};

class Owner {
 public:
  static constexpr uint64_t kMagic = 0x5445535400000001;
  Owner() { handle_.Bind(this); }
  ~Owner() { handle_.Unbind(); }
  Public* pub() { return &handle_.pub; }

 private:
  Handle<Public, Owner> handle_;
};

TEST(HandleTest, LiveHandleConvertsBack) {
  Owner owner;
  EXPECT_EQ((Handle<Public, Owner>::From(owner.pub())), &owner);
}

TEST(HandleTest, ForeignPointerIsRefused) {
  Handle<Public, Owner> foreign;  // never bound
  EXPECT_EQ((Handle<Public, Owner>::From(&foreign.pub)), nullptr);
  EXPECT_EQ((Handle<Public, Owner>::From(nullptr)), nullptr);
}

// Called through a pointer the compiler cannot see through, as a destroy verb
// is called by the application. Its own code sees the object's lifetime end
// and may drop the destructor's stores.
void DestroyOwner(Owner* owner) { owner->~Owner(); }
void (*volatile Destroy)(Owner*) = DestroyOwner;

// Unbind must survive that, or a destroyed handle still converts.
TEST(HandleTest, DestroyedHandleIsRefused) {
  alignas(Owner) unsigned char storage[sizeof(Owner)];
  Owner* owner = new (storage) Owner();
  const void* pub = owner->pub();
  Destroy(owner);
  EXPECT_EQ((Handle<Public, Owner>::From(pub)), nullptr);
}

}  // namespace
}  // namespace simverbs
