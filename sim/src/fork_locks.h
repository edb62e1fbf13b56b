#pragma once

// fork() and the library's process-wide locks. In a child of fork() only the
// forking thread runs: a lock that another thread of the parent held would
// never be released there, and what it guarded could be half changed (a
// device's list of contexts in the middle of an insert). So the forking
// thread takes every process-wide lock before fork() and releases each in
// the parent and in the child, in one handler registered at load, which
// takes them in the order the code nests them, outermost first (in another
// order it could wait for ever on a thread that holds one and waits for the
// next), after a lock of its own that makes forks of two threads take turns:
//   1. the fabric's attach lock (ibv_open_device: it waits for the progress
//      thread, which takes the locks below);
//   2. each device's contexts lock (device-wide events take the engine lock
//      under it);
//   3. the engine lock (the data path);
//   4. each device's own lock (port states, reused QP numbers: taken under
//      the engine lock; it takes the scheduler's);
//   5. the leaf locks, under which no lock of the library is taken, handed in
//      by their owners (HoldAcrossFork).
// A fork() therefore waits until a verb another thread is in has let these
// go (an ibv_open_device, at most its bounded waits). The locks of single
// objects (a CQ's, an SRQ's, an event queue's) are not taken: a child of
// fork() does not use its parent's verbs objects (ibv_fork_init(3)).

namespace simverbs {

// A leaf lock (see above), held across fork() from now on: `lock` is called
// before fork(), `unlock` after it in the parent and in the child. At most
// kMaxForkLeaves; called once per lock, when its owner is made.
constexpr int kMaxForkLeaves = 16;
void HoldAcrossFork(void (*lock)(), void (*unlock)());

}  // namespace simverbs
