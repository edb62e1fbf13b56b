#!/usr/bin/env python3
"""simverbs record against the simulator: recording a simulated device under `simverbs run` gives
back the profile's own entry for it (a round trip through the system libibverbs' API), the result
loads with `simverbs devices`, --stable-identity rewrites only the node GUID and the link-local
GIDs, and an existing file keeps its behaviour and description.

usage: record_check.py SIMVERBS_CLI FIXTURES_DEVICES_DIR
(SIMVERBS_FABRIC is set by the meson test.)
"""
import json
import os
import subprocess
import sys
import tempfile

from check_tally import Tally

cli, devices_dir = sys.argv[1], sys.argv[2]
tally = Tally()
expect = tally.expect


def record(profile, *args):
    return subprocess.run([cli, "run", "--profile", profile, "--", cli, "record", *args],
                          capture_output=True, text=True, timeout=60)


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


with tempfile.TemporaryDirectory(prefix="record-check.") as tmp:
    for profile in ("sim-ib", "sim-roce"):
        source = load(os.path.join(devices_dir, profile + ".json"))
        for device in source["devices"]:
            out = os.path.join(tmp, f"{profile}-{device['name']}.json")
            r = record(profile, "--device", device["name"], out)
            expect(f"{profile} {device['name']}: record exits 0", r.returncode == 0, r.stderr)
            if r.returncode != 0:
                continue
            got = load(out)
            expect(f"{profile} {device['name']}: the recorded entry is the profile's", got["devices"] == [device],
                   json.dumps(got["devices"])[:2000])
            expect(f"{profile} {device['name']}: named after the file", got["profile"] == os.path.basename(out)[:-5],
                   got["profile"])
            r = subprocess.run([cli, "devices", "--profile", out], capture_output=True, text=True, timeout=60)
            expect(f"{profile} {device['name']}: simverbs devices loads it",
                   r.returncode == 0 and f"{device['name']} port 1" in r.stdout, r.stdout + r.stderr)

    # --stable-identity on the RoCE profile: GUIDs and fe80:: GIDs change, nothing else.
    source = load(os.path.join(devices_dir, "sim-roce.json"))["devices"][0]
    out = os.path.join(tmp, "stable.json")
    r = record("sim-roce", "--device", source["name"], "--stable-identity", out)
    expect("--stable-identity exits 0", r.returncode == 0, r.stderr)
    if r.returncode == 0:
        got = load(out)["devices"][0]
        expect("--stable-identity: node GUID of MAC 02:00:0a:00:00:01",
               got["device"]["node_guid"] == got["device"]["sys_image_guid"] == "0x00000afffe000001",
               got["device"]["node_guid"])
        gids = [g["gid"] for g in got["ports"][0]["gids"]]
        want = ["fe80::aff:fe00:1" if g["gid"].startswith("fe80:") else g["gid"] for g in source["ports"][0]["gids"]]
        expect("--stable-identity: link-local GIDs replaced, the others kept", gids == want, f"{gids} != {want}")
        got["device"]["node_guid"] = source["device"]["node_guid"]
        got["device"]["sys_image_guid"] = source["device"]["sys_image_guid"]
        for g, s in zip(got["ports"][0]["gids"], source["ports"][0]["gids"]):
            g["gid"] = s["gid"]
        expect("--stable-identity: nothing else changes", got == source)
    r = record("sim-roce", "--stable-mac", "02:00:0a:00:00:02", os.path.join(tmp, "mac.json"))
    expect("--stable-mac picks the MAC", r.returncode == 0 and
           load(os.path.join(tmp, "mac.json"))["devices"][0]["device"]["node_guid"] == "0x00000afffe000002", r.stderr)
    r = record("sim-roce", "--stable-mac", "not-a-mac", os.path.join(tmp, "bad-mac.json"))
    expect("a bad MAC is a usage error", r.returncode == 2 and "MAC" in r.stderr, f"exit {r.returncode}: {r.stderr}")

    # An existing file keeps its name, description and behaviour; its devices are replaced.
    out = os.path.join(tmp, "existing.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"profile": "kept-name", "description": "kept description", "devices": [],
                   "behaviour": {"cq_overrun": "lazy"}}, f)
    r = record("sim-ib", "--device", "sim1", out)
    got = load(out) if r.returncode == 0 else {}
    expect("an existing file keeps name, description and behaviour",
           r.returncode == 0 and got.get("profile") == "kept-name" and got.get("description") == "kept description"
           and got.get("behaviour") == {"cq_overrun": "lazy"} and got["devices"][0]["name"] == "sim1",
           r.stderr + json.dumps(got)[:500])

    r = record("sim-ib", "--device", "nosuchdev", os.path.join(tmp, "none.json"))
    expect("an unknown device fails and names the devices there are",
           r.returncode != 0 and "nosuchdev" in r.stderr and "sim0" in r.stderr
           and not os.path.exists(os.path.join(tmp, "none.json")), f"exit {r.returncode}: {r.stderr}")

    r = record("sim-ib", "--device", "sim0")
    expect("without OUT the profile goes to stdout", r.returncode == 0 and json.loads(r.stdout)["devices"][0]["name"] == "sim0",
           r.stderr)

tally.finish()
