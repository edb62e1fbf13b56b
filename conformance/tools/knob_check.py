#!/usr/bin/env python3
"""Each behaviour knob of a simulator profile has a conformance test that depends on it.

  knob_check.py VERBS_CONFORMANCE SIM_LIBDIR BACKENDS_DIR PROFILE.json FABRIC_PREFIX

For every knob in KNOBS the profile is copied with that one knob flipped and the named test is
run against it (backend answers from the simulator's backend file, which describe the default
behaviour): it must fail. The same tests run once against the unmodified profile and must pass,
so a failure here means the knob changed what the test saw, not that the test is broken.

Some knobs make the simulated device harder to get right (a destroyed QP's number given to the next
QP at once, say). The tests in HOLD_UNDER check what must hold however the device behaves, and
skip where it does not behave that way: they run with the knob flipped, and must pass there.
SIMVERBS_SEED is fixed, so knobs that act through the seeded scheduler fail the same way each run.
"""
import json
import os
import subprocess
import sys
import tempfile

# (behaviour field, flipped value, the test whose expectation the default value satisfies)
KNOBS = [
    ("cq_overrun", "lazy", "CqOverrunTest.IdleQpOnCqEntersErr_CqOverrun"),
    ("cq_overrun", "rxe-6.1", "CqOverrunTest.PollFollowsBackend_AfterOverrun"),
    ("post_send_before_rts", "queue", "QpPostTest.PostSendFollowsBackend_Init"),
    ("qp_access_err_event", False, "QpErrorTest.ResponderRaisesQpAccessErr_BadRkey"),
    ("last_wqe_reached_event", False, "SrqTest.LastWqeReached_SrqQpEntersErr"),
    ("comm_est_event", False, "QpCommEstTest.RaisedByFirstPacketInRtr"),
    ("sq_drained_event", "always", "QpSqdTest.NoSqDrained_WithoutNotify"),
    ("rereg_mr_no_flags", "input", "PdMrTest.ReregMrFails_NoFlags"),
    ("unreliable_send_error", "err", "QpErrorTest.UcSendErrorStopsOnlyTheSendQueue"),
    ("unreliable_send_error", "err", "QpDatapathTest.UdSendThroughAhOfAnotherPdFails"),
    ("srq_receive_pd", "qp", "SrqTest.ReceiveBuffersAreCheckedAgainstTheSrqsPd"),
    ("wr_qkey_high_bit", "literal", "QpDatapathTest.UdWrQkeyWithHighBitSendsTheQpsQkey"),
    ("send_queue_release", "completion", "QpPostTest.SendSlotsFreeFollowBackend"),
    ("receive_queue_release", "consumption", "QpPostTest.RecvSlotsFreeFollowBackend"),
    ("receive_queue_release", "consumption", "SrqTest.SlotsFreeFollowBackend"),
    ("reset_completions", "keep", "QpErrorTest.UnpolledCompletionsAtResetFollowBackend"),
    ("reset_completions", "keep", "QpErrorTest.UnpolledCompletionsAtDestroyFollowBackend"),
    ("rereg_mr", "unsupported", "PdMrTest.ReregMrChangeAccessSucceeds"),
    ("cq_ex_wc_flags", "ib", "CqTest.CreateCqExVendorWcFlagsFollowBackend"),
    ("ignore_overrun", "unsupported", "CqOverrunTest.IgnoreOverrunCqNeverErrors"),
    ("srq_zero_wr", "einval", "SrqTest.CreateWithZeroMaxWrFollowsBackend"),
    ("srq_size", "pow2-1", "SrqTest.ActualSizeFollowsBackend"),
    ("qp_size", "pow2-1", "QpCreateTest.ActualCapsFollowBackend"),
    ("send_sge", "inline-room", "QpCreateTest.ActualCapsFollowBackend"),
    ("rate_limit", "unsupported", "QpAttrTest.ModifyWithRateLimitFollowsBackend"),
    ("max_inline_data", 512, "QpCreateTest.InlineLimitFollowsBackend"),
    ("cq_size", "pow2-1", "CqTest.ActualSizeFollowsBackend"),
    ("recv_wc_grh", "always", "QpDatapathTest.RcRecvCompletionGrhFlagFollowsBackend"),
    ("misaligned_atomic", "einval", "QpErrorTest.MisalignedAtomicFollowsBackend"),
    ("solicited", "se-or-flush", "CqArmTest.SolicitedOnlyArmAndSendErrorFollowBackend"),
    ("spurious_comp_events", True, "CqArmTest.ArmWithUnpolledCompletionGivesNoEvent"),
    ("srq_order", "any", "SrqTest.ReceivesTakenInPostingOrder"),
    ("qp_number_reuse", True, "QpCreateTest.DestroyedQpNumberNotReusedAtOnce"),
    ("error_wc_fields", "garbage", "QpErrorTest.FlushedCompletionInvalidFieldsZeroed"),
]

# (behaviour field, value, a test that skips unless the device behaves so, and must pass when it does)
HOLD_UNDER = [
    ("qp_number_reuse", True, "MwTest.Type2WindowServesNotTheNextQpOfItsNumber"),
    ("cq_overrun", "lazy", "CqOverrunTest.RaisedCqErrFailsTheQpThatCompletesIntoIt"),
]


def run(binary, libdir, backends_dir, profile_path, fabric, tests):
    env = dict(os.environ, LD_LIBRARY_PATH=libdir, SIMVERBS_PROFILE=profile_path, SIMVERBS_FABRIC=fabric,
               SIMVERBS_SEED="1")
    proc = subprocess.run([binary, "--backends-dir", backends_dir, "--gtest_filter=" + ":".join(tests)],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    failed = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("FAILED: ")}
    passed = sum(1 for line in proc.stdout.splitlines() if line.startswith("[       OK ]"))
    return proc.returncode, failed, passed, proc.stdout


def write_flipped(base, knob, value, path):
    """The profile `base` with behaviour field `knob` set to `value`, written to `path`."""
    flipped = json.loads(json.dumps(base))
    flipped.setdefault("behaviour", {})[knob] = value
    with open(path, "w") as f:
        json.dump(flipped, f)


def main():
    binary, libdir, backends_dir, profile, fabric = sys.argv[1:6]
    with open(profile) as f:
        base = json.load(f)
    tests = sorted({test for _, _, test in KNOBS})
    problems = []
    rc, failed, passed, out = run(binary, libdir, backends_dir, profile, fabric + "-base", tests)
    if rc != 0 or passed != len(tests):
        problems.append(f"with the unmodified profile {passed}/{len(tests)} tests passed (failed: {sorted(failed)})")
        print(out)
    with tempfile.TemporaryDirectory() as tmp:
        for i, (knob, value, test) in enumerate(KNOBS):
            path = os.path.join(tmp, f"knob{i}.json")
            write_flipped(base, knob, value, path)
            rc, failed, _, out = run(binary, libdir, backends_dir, path, f"{fabric}-{i}", [test])
            verdict = "fails" if test in failed else "DOES NOT FAIL"
            print(f"{knob} = {json.dumps(value)}: {test} {verdict}")
            if test not in failed:
                problems.append(f"{knob} = {json.dumps(value)} did not make {test} fail")
                print(out)
        for i, (knob, value, test) in enumerate(HOLD_UNDER):
            path = os.path.join(tmp, f"hold{i}.json")
            write_flipped(base, knob, value, path)
            rc, failed, passed, out = run(binary, libdir, backends_dir, path, f"{fabric}-hold{i}", [test])
            verdict = "passes" if rc == 0 and passed == 1 else "DOES NOT PASS (failed or skipped)"
            print(f"{knob} = {json.dumps(value)}: {test} {verdict}")
            if verdict != "passes":
                problems.append(f"with {knob} = {json.dumps(value)}, {test} did not pass")
                print(out)
    for p in problems:
        print("knob_check:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
