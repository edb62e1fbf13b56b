#include "verb.h"

#include <cerrno>
#include <cstring>
#include <initializer_list>

namespace verbs_fuzz {
namespace {

struct VerbInfo {
  Verb verb;
  const char* name;
  std::initializer_list<int> errnos;
};

// clang-format off
// Creation verbs may always run out of resources (ENOMEM); EOPNOTSUPP is a
// provider's answer for a feature it lacks (rdma-core's dummy ops).
constexpr VerbInfo kVerbs[] = {
    {Verb::kOpenDevice,         "ibv_open_device",         {ENOMEM, ENODEV, EMFILE, ENFILE}},
    {Verb::kCloseDevice,        "ibv_close_device",        {}},
    {Verb::kQueryDevice,        "ibv_query_device",        {}},
    {Verb::kQueryPort,          "ibv_query_port",          {}},
    {Verb::kAllocPd,            "ibv_alloc_pd",            {ENOMEM}},
    {Verb::kDeallocPd,          "ibv_dealloc_pd",          {EBUSY}},
    // The kernel pins the pages: EFAULT for memory it cannot pin.
    {Verb::kRegMr,              "ibv_reg_mr",              {EINVAL, EFAULT, ENOMEM, EACCES, EOPNOTSUPP}},
    // ibv_rereg_mr returns one of enum ibv_rereg_mr_err_code, checked apart.
    {Verb::kReregMr,            "ibv_rereg_mr",            {}},
    // A memory window bound to the MR keeps it.
    {Verb::kDeregMr,            "ibv_dereg_mr",            {EBUSY}},
    {Verb::kAllocMw,            "ibv_alloc_mw",            {EINVAL, ENOMEM, EOPNOTSUPP}},
    // verbs.h's inline ibv_bind_mw: EINVAL for a bad window or range, EPERM
    // for an MR of another PD; then the provider's post_send.
    {Verb::kBindMw,             "ibv_bind_mw",             {EINVAL, EPERM, ENOMEM, EOPNOTSUPP}},
    {Verb::kDeallocMw,          "ibv_dealloc_mw",          {}},
    {Verb::kCreateCompChannel,  "ibv_create_comp_channel", {ENOMEM, EMFILE, ENFILE}},
    {Verb::kDestroyCompChannel, "ibv_destroy_comp_channel", {EBUSY}},
    {Verb::kCreateCq,           "ibv_create_cq",           {EINVAL, ENOMEM, EOPNOTSUPP}},
    {Verb::kResizeCq,           "ibv_resize_cq",           {EINVAL, ENOMEM, EOPNOTSUPP}},
    {Verb::kDestroyCq,          "ibv_destroy_cq",          {EBUSY}},
    // A CQ in error cannot be armed.
    {Verb::kReqNotifyCq,        "ibv_req_notify_cq",       {EINVAL}},
    {Verb::kPollCq,             "ibv_poll_cq",             {}},
    // The channel's fd is O_NONBLOCK.
    {Verb::kGetCqEvent,         "ibv_get_cq_event",        {EAGAIN}},
    {Verb::kCreateQp,           "ibv_create_qp",           {EINVAL, ENOMEM, EOPNOTSUPP}},
    {Verb::kModifyQp,           "ibv_modify_qp",           {EINVAL, ENOMEM, EOPNOTSUPP}},
    {Verb::kQueryQp,            "ibv_query_qp",            {}},
    // Only while attached to a multicast group (the walk never attaches).
    {Verb::kDestroyQp,          "ibv_destroy_qp",          {EBUSY}},
    {Verb::kCreateSrq,          "ibv_create_srq",          {EINVAL, ENOMEM, EOPNOTSUPP}},
    {Verb::kModifySrq,          "ibv_modify_srq",          {EINVAL, ENOMEM, EOPNOTSUPP}},
    {Verb::kQuerySrq,           "ibv_query_srq",           {}},
    {Verb::kPostSrqRecv,        "ibv_post_srq_recv",       {EINVAL, ENOMEM}},
    {Verb::kDestroySrq,         "ibv_destroy_srq",         {EBUSY}},
    {Verb::kCreateAh,           "ibv_create_ah",           {EINVAL, ENOMEM, EOPNOTSUPP}},
    {Verb::kDestroyAh,          "ibv_destroy_ah",          {}},
    {Verb::kPostSend,           "ibv_post_send",           {EINVAL, ENOMEM}},
    {Verb::kPostRecv,           "ibv_post_recv",           {EINVAL, ENOMEM}},
    // The async fd is O_NONBLOCK.
    {Verb::kGetAsyncEvent,      "ibv_get_async_event",     {EAGAIN}},
    {Verb::kInject,             "simverbs control API",    {EINVAL}},
};
// clang-format on

static_assert(std::size(kVerbs) == static_cast<size_t>(Verb::kCount));

constexpr bool InOrder() {
  for (size_t i = 0; i < std::size(kVerbs); ++i) {
    if (kVerbs[i].verb != static_cast<Verb>(i)) return false;
  }
  return true;
}
static_assert(InOrder(), "kVerbs is indexed by Verb");

const VerbInfo& Info(Verb verb) { return kVerbs[static_cast<size_t>(verb)]; }

}  // namespace

const char* VerbName(Verb verb) { return Info(verb).name; }

bool ErrnoDocumented(Verb verb, int err) {
  for (int e : Info(verb).errnos) {
    if (e == err) return true;
  }
  return false;
}

std::string DocumentedErrnos(Verb verb) {
  std::string out = "{";
  for (int e : Info(verb).errnos) {
    if (out.size() > 1) out += ", ";
    out += strerrorname_np(e) ? strerrorname_np(e) : std::to_string(e);
  }
  return out + "}";
}

std::string ErrnoName(int err) {
  const char* name = err > 0 ? strerrorname_np(err) : nullptr;
  return std::string(name ? name : "?") + " (" + std::to_string(err) + ")";
}

const char* WrOpcodeName(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
      return "IBV_WR_RDMA_WRITE";
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return "IBV_WR_RDMA_WRITE_WITH_IMM";
    case IBV_WR_SEND:
      return "IBV_WR_SEND";
    case IBV_WR_SEND_WITH_IMM:
      return "IBV_WR_SEND_WITH_IMM";
    case IBV_WR_RDMA_READ:
      return "IBV_WR_RDMA_READ";
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return "IBV_WR_ATOMIC_CMP_AND_SWP";
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return "IBV_WR_ATOMIC_FETCH_AND_ADD";
    case IBV_WR_LOCAL_INV:
      return "IBV_WR_LOCAL_INV";
    case IBV_WR_BIND_MW:
      return "IBV_WR_BIND_MW";
    case IBV_WR_SEND_WITH_INV:
      return "IBV_WR_SEND_WITH_INV";
    case IBV_WR_TSO:
      return "IBV_WR_TSO";
    case IBV_WR_DRIVER1:
      return "IBV_WR_DRIVER1";
    default:
      return "an unknown opcode";
  }
}

}  // namespace verbs_fuzz
