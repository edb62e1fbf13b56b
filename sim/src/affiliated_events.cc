#include "affiliated_events.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "context.h"

namespace simverbs {
namespace {

constexpr long kDefaultDestroyWarnMs = 3000;

// SIMVERBS_DESTROY_WARN_MS: how long a destroy waits for acks before it says
// so on stderr; 0 never says it. Read at each destroy (not a hot path), so a
// program or test may change it at run time.
long DestroyWarnMs() {
  const char* env = std::getenv("SIMVERBS_DESTROY_WARN_MS");
  if (env == nullptr || *env == '\0') return kDefaultDestroyWarnMs;
  char* end = nullptr;
  const long value = std::strtol(env, &end, 10);
  if (*end != '\0' || value < 0) {
    std::fprintf(stderr, "simverbs: SIMVERBS_DESTROY_WARN_MS=%s is not a number of milliseconds; using %ld\n", env,
                 kDefaultDestroyWarnMs);
    return kDefaultDestroyWarnMs;
  }
  return value;
}

// The public cond is made with default attributes, so its clock is CLOCK_REALTIME.
timespec RealtimeAfter(long ms) {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_sec += ms / 1000;
  t.tv_nsec += (ms % 1000) * 1000000;
  if (t.tv_nsec >= 1000000000) {
    t.tv_sec += 1;
    t.tv_nsec -= 1000000000;
  }
  return t;
}

// "2 completion events read but not acked (ibv_ack_cq_events)", or the
// over-acked case; empty when the counts match.
std::string Mismatch(uint32_t reported, uint32_t acked, const char* what, const char* ack_call) {
  const auto missing = static_cast<int32_t>(reported - acked);
  if (missing == 0) return "";
  char text[160];
  if (missing > 0) {
    std::snprintf(text, sizeof text, "%d %s event%s read but not acked (%s)", missing, what, missing == 1 ? "" : "s",
                  ack_call);
  } else {
    std::snprintf(text, sizeof text, "%d more %s than %s events read", -missing, ack_call, what);
  }
  return text;
}

}  // namespace

AffiliatedEvents::AffiliatedEvents(Context* ctx, const char* kind, void* element, pthread_mutex_t* mutex,
                                   pthread_cond_t* cond, uint32_t* async_acked, uint32_t* comp_acked)
    : ctx_(ctx),
      kind_(kind),
      element_(element),
      mutex_(mutex),
      cond_(cond),
      async_acked_(async_acked),
      comp_acked_(comp_acked) {
  pthread_mutex_init(mutex_, nullptr);
  pthread_cond_init(cond_, nullptr);
  *async_acked_ = 0;
  if (comp_acked_) *comp_acked_ = 0;
}

AffiliatedEvents::~AffiliatedEvents() {
  pthread_cond_destroy(cond_);
  pthread_mutex_destroy(mutex_);
}

void AffiliatedEvents::RaiseAsync(ibv_event_type type) {
  QueuedEvent ev;
  ev.type = type;
  ev.element = element_;
  ev.reported = &async_reported_;
  ctx_->RaiseAsync(ev);
}

QueuedEvent AffiliatedEvents::CompletionEvent() {
  QueuedEvent ev;
  ev.is_completion = true;
  ev.element = element_;
  ev.reported = &comp_reported_;
  return ev;
}

bool AffiliatedEvents::AllAckedLocked() const {
  if (*async_acked_ != async_reported_.load()) return false;
  return comp_acked_ == nullptr || *comp_acked_ == comp_reported_.load();
}

void AffiliatedEvents::WarnLocked(uint32_t id, long waited_ms) const {
  std::string counts = Mismatch(async_reported_.load(), *async_acked_, "async", "ibv_ack_async_event");
  if (comp_acked_) {
    const std::string comp = Mismatch(comp_reported_.load(), *comp_acked_, "completion", "ibv_ack_cq_events");
    if (!comp.empty()) counts = counts.empty() ? comp : comp + ", " + counts;
  }
  std::string destroy_call = "ibv_destroy_";
  for (const char* c = kind_; *c; ++c) destroy_call += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
  // QP numbers are shown in hex, as ibv_rc_pingpong and perftest print them.
  char name[64];
  if (std::string(kind_) == "QP") {
    std::snprintf(name, sizeof name, "QP number 0x%06x", id);
  } else {
    std::snprintf(name, sizeof name, "%s handle %u", kind_, id);
  }
  std::fprintf(stderr, "simverbs: %s has waited %ld ms for %s (%p): %s; it returns once they are acked\n",
               destroy_call.c_str(), waited_ms, name, element_, counts.c_str());
}

void AffiliatedEvents::WaitForAcks(uint32_t id) {
  const long warn_ms = DestroyWarnMs();
  const timespec warn_at = RealtimeAfter(warn_ms);
  bool warned = warn_ms == 0;
  pthread_mutex_lock(mutex_);
  while (!AllAckedLocked()) {
    if (warned) {
      pthread_cond_wait(cond_, mutex_);
    } else if (pthread_cond_timedwait(cond_, mutex_, &warn_at) == ETIMEDOUT && !AllAckedLocked()) {
      WarnLocked(id, warn_ms);
      warned = true;
    }
  }
  pthread_mutex_unlock(mutex_);
}

}  // namespace simverbs
