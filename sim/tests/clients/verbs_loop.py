#!/usr/bin/env python3
"""A small verbs program for the fault tests (run it with 'simverbs run').

usage: verbs_loop.py ITERATIONS EVENTS [fatal-checks] [extended]

Connects two RC QPs of one context to each other (a third, unconnected, receives
from an SRQ), then ITERATIONS times posts
a receive on the second and a signaled SEND on the first and polls the one CQ
for both completions. Then reads EVENTS async events. Prints one line per
thing it sees: 'QPN a b srq_qp', 'WC i <opcode> <status> <qpn>', 'POLL_ERROR i',
'POST_ERROR i <errno>', 'EVENT <type>'. With fatal-checks, after the events
it tries verbs and prints 'AFTER <verb> <errno or 0>'. With extended, the CQ is
an extended CQ polled with ibv_start_poll / ibv_next_poll / ibv_end_poll and the
two connected QPs post their SENDs with ibv_wr_start / ibv_wr_send / ibv_wr_complete.
Every wait is bounded: a missing completion or event ends the program with
'TIMEOUT ...' and exit status 3.
"""
import errno
import signal
import sys
import time

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr
from pyverbs.cq import CQ, CQEX, CqInitAttrEx, PollCqAttr
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPEx, QPInitAttr, QPInitAttrEx
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import RecvWR, SendWR, SGE

iterations, events = int(sys.argv[1]), int(sys.argv[2])
fatal_checks = "fatal-checks" in sys.argv[3:]
extended = "extended" in sys.argv[3:]


def out(*words):
    print(*words, flush=True)


def errno_of(fn):
    try:
        fn()
        return 0
    except PyverbsRDMAError as err:
        return err.error_code


ctx = d.Context(name="sim0")
pd = PD(ctx)
cq = CQEX(ctx, CqInitAttrEx(cqe=64, wc_flags=e.IBV_WC_EX_WITH_QP_NUM)) if extended else CQ(ctx, 64)
mr = MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
cap = QPCap(max_send_wr=16, max_recv_wr=16)
if extended:
    qps = [QPEx(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap, pd=pd,
                                  comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                                  send_ops_flags=e.IBV_QP_EX_WITH_SEND)) for _ in range(2)]
else:
    qps = [QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)) for _ in range(2)]
# A third QP that receives from an SRQ, to name that SRQ from outside.
srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=4, max_sge=1)))
srq_qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, srq=srq,
                           cap=QPCap(max_send_wr=1, max_recv_wr=0, max_recv_sge=0)))
lid = ctx.query_port(1).lid
for qp, peer in ((qps[0], qps[1]), (qps[1], qps[0])):
    attr = QPAttr(qp_state=e.IBV_QPS_INIT, cur_qp_state=e.IBV_QPS_RESET)
    attr.port_num = 1
    attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
    qp.to_init(attr)
    attr = QPAttr(qp_state=e.IBV_QPS_RTR)
    attr.dest_qp_num = peer.qp_num
    attr.path_mtu = e.IBV_MTU_1024
    attr.rq_psn = 0
    attr.max_dest_rd_atomic = 1
    attr.min_rnr_timer = 1
    attr.ah_attr = AHAttr(dlid=lid, port_num=1)
    qp.to_rtr(attr)
    attr = QPAttr(qp_state=e.IBV_QPS_RTS)
    attr.sq_psn = 0
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = 7
    attr.max_rd_atomic = 1
    qp.to_rts(attr)
out("QPN", qps[0].qp_num, qps[1].qp_num, srq_qp.qp_num)

sge = SGE(mr.buf, 8, mr.lkey)


def post_send(qp, wr_id):
    if not extended:
        qp.post_send(SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge], send_flags=e.IBV_SEND_SIGNALED))
        return
    qp.wr_start()
    qp.wr_id = wr_id
    qp.wr_flags = e.IBV_SEND_SIGNALED
    qp.wr_send()
    qp.wr_set_sge(sge)
    qp.wr_complete()


class Wc:
    def __init__(self, opcode, status, qp_num):
        self.opcode, self.status, self.qp_num = opcode, status, qp_num


def poll(n):
    """Up to n completions as (count, list), like CQ.poll; raises PyverbsRDMAError when the CQ fails."""
    if not extended:
        return cq.poll(n)
    ret = cq.start_poll(PollCqAttr())
    if ret == errno.ENOENT:
        return 0, []
    if ret != 0:
        raise PyverbsRDMAError("ibv_start_poll failed", ret)
    wcs = []
    while True:
        wcs.append(Wc(cq.read_opcode(), cq.status, cq.read_qp_num()))
        if len(wcs) == n or cq.poll_next() != 0:
            break
    cq.end_poll()
    return len(wcs), wcs


for i in range(1, iterations + 1):
    qps[1].post_recv(RecvWR(wr_id=i, num_sge=1, sg=[sge]))
    try:
        post_send(qps[0], i)
    except PyverbsRDMAError as err:
        out("POST_ERROR", i, err.error_code)
        continue
    seen = 0
    deadline = time.time() + 5
    while seen < 2:
        try:
            n, wcs = poll(2 - seen)
        except PyverbsRDMAError:
            out("POLL_ERROR", i)
            break
        for wc in wcs[:n]:
            out("WC", i, wc.opcode, wc.status, wc.qp_num)
        seen += n
        # A flushed SEND has no receive to go with it.
        if any(wc.status != e.IBV_WC_SUCCESS for wc in wcs[:n]):
            break
        if n == 0 and time.time() > deadline:
            out("TIMEOUT completions of iteration", i)
            sys.exit(3)

signal.signal(signal.SIGALRM, lambda *_: (out("TIMEOUT waiting for an async event"), sys.exit(3)))
for _ in range(events):
    signal.alarm(10)
    ev = ctx.get_async_event()
    signal.alarm(0)
    out("EVENT", ev.event_type)
    ev.ack()

if fatal_checks:
    out("AFTER alloc_pd", errno_of(lambda: PD(ctx)))
    out("AFTER query_port", errno_of(lambda: ctx.query_port(1)))
    out("AFTER create_cq", errno_of(lambda: CQ(ctx, 4)))
    out("AFTER query_device", errno_of(lambda: ctx.query_device()))
    qps[1].post_recv(RecvWR(wr_id=99, num_sge=1, sg=[sge]))
    out("AFTER post_send", errno_of(lambda: qps[0].post_send(
        SendWR(wr_id=99, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge], send_flags=e.IBV_SEND_SIGNALED))))
    n, _ = cq.poll(4)
    out("AFTER poll_cq", n)
    out("AFTER destroy_qp", errno_of(lambda: qps[0].close()))
out("DONE")
