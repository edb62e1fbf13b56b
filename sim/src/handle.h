#pragma once

// The public verbs structs that applications see are embedded in simulator
// objects, the way rdma-core providers embed them (container_of). A Handle
// puts the public struct first, so a pointer to it converts back to the
// Handle; the magic word rejects pointers that are not ours.

#include <cstdint>
#include <type_traits>

namespace simverbs {

template <typename Public, typename Owner>
struct Handle {
  Public pub{};
  Owner* owner = nullptr;
  uint64_t magic = 0;

  void Bind(Owner* o) {
    owner = o;
    magic = Owner::kMagic;
  }
  // Called from destructors, where a plain store is dead to the compiler
  // (the object's lifetime ends) and is dropped: volatile keeps it, so a
  // destroyed handle is refused while its memory is not reused.
  void Unbind() { *static_cast<volatile uint64_t*>(&magic) = 0; }

  static Owner* From(const void* p) {
    if (p == nullptr) return nullptr;
    auto* h = static_cast<const Handle*>(p);
    return *static_cast<const volatile uint64_t*>(&h->magic) == Owner::kMagic ? h->owner : nullptr;
  }
};

}  // namespace simverbs
