#pragma once

// The verbs the walk calls, and for each the errno values a failure may
// carry. The man pages mostly say "errno on failure"; the sets below are what
// rdma-core and the kernel can return for the arguments the walk passes
// (which are never invalid handles). Anything else is a bug.

#include <infiniband/verbs.h>

#include <string>

namespace verbs_fuzz {

enum class Verb {
  kOpenDevice,
  kCloseDevice,
  kQueryDevice,
  kQueryPort,
  kAllocPd,
  kDeallocPd,
  kRegMr,
  kReregMr,
  kDeregMr,
  kAllocMw,
  kBindMw,
  kDeallocMw,
  kCreateCompChannel,
  kDestroyCompChannel,
  kCreateCq,
  kResizeCq,
  kDestroyCq,
  kReqNotifyCq,
  kPollCq,
  kGetCqEvent,
  kCreateQp,
  kModifyQp,
  kQueryQp,
  kDestroyQp,
  kCreateSrq,
  kModifySrq,
  kQuerySrq,
  kPostSrqRecv,
  kDestroySrq,
  kCreateAh,
  kDestroyAh,
  kPostSend,
  kPostRecv,
  kGetAsyncEvent,
  kInject,  // the simulator's control API
  kCount,
};

const char* VerbName(Verb verb);
// Whether a failure of `verb` may carry `err`.
bool ErrnoDocumented(Verb verb, int err);
// "{EINVAL, ENOMEM}" for messages.
std::string DocumentedErrnos(Verb verb);
// "EINVAL (22)".
std::string ErrnoName(int err);
// "IBV_WR_SEND" (libibverbs 44 has no ibv_wr_opcode_str).
const char* WrOpcodeName(ibv_wr_opcode op);

}  // namespace verbs_fuzz
