#!/usr/bin/env python3
"""Runs the unmodified Debian ibv_devinfo -v and ibv_devices on the simulator
and compares what they print with the profile, field by field.

usage: devinfo_check.py SIMVERBS_CLI PROFILE_JSON
"""
import ipaddress
import json
import re
import subprocess
import sys

MTU = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}
PORT_STATE = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
ATOMIC = {"NONE": 0, "HCA": 1, "GLOB": 2}
DEVICE_INTS = [
    "vendor_part_id", "max_qp", "max_qp_wr", "max_sge", "max_sge_rd", "max_cq", "max_cqe", "max_mr", "max_pd",
    "max_qp_rd_atom", "max_ee_rd_atom", "max_res_rd_atom", "max_qp_init_rd_atom", "max_ee_init_rd_atom", "max_ee",
    "max_rdd", "max_mw", "max_raw_ipv6_qp", "max_raw_ethy_qp", "max_mcast_grp", "max_mcast_qp_attach",
    "max_total_mcast_qp_attach", "max_ah", "max_fmr", "max_srq", "max_srq_wr", "max_srq_sge", "max_pkeys",
    "local_ca_ack_delay", "vendor_id", "hw_ver", "device_cap_flags", "max_mr_size", "page_size_cap",
]
PORT_INTS = [  # (ibv_devinfo's name, profile's name)
    ("sm_lid", "sm_lid"), ("port_lid", "lid"), ("port_lmc", "lmc"), ("max_msg_sz", "max_msg_sz"),
    ("port_cap_flags", "port_cap_flags"), ("port_cap_flags2", "port_cap_flags2"), ("max_vl_num", "max_vl_num"),
    ("bad_pkey_cntr", "bad_pkey_cntr"), ("qkey_viol_cntr", "qkey_viol_cntr"), ("sm_sl", "sm_sl"),
    ("pkey_tbl_len", "pkey_tbl_len"), ("gid_tbl_len", "gid_tbl_len"), ("subnet_timeout", "subnet_timeout"),
    ("init_type_reply", "init_type_reply"), ("active_width", "active_width"), ("active_speed", "active_speed"),
    ("phys_state", "phys_state"),
]

failures = []


def check(what, got, want):
    if got != want:
        failures.append(f"{what}: ibv_devinfo says {got!r}, the profile says {want!r}")


def as_int(v):
    return int(v, 0) if isinstance(v, str) else v


def printed_int(text):
    """ibv_devinfo prints 'NAME (value)' for enums and plain or 0x numbers otherwise."""
    m = re.search(r"\((\d+)\)\s*$", text)
    if m:
        return int(m.group(1))
    return int(text.split()[0], 0)


def parse_devinfo(out):
    """[{'fields': {...}, 'ports': [{'fields': {...}, 'gids': [...]}]}] per hca_id."""
    devices = []
    for line in out.splitlines():
        m = re.match(r"^(\t*)([A-Za-z0-9_ ]+?):\s*(.*)$", line)
        if m and m.group(2) == "hca_id":
            devices.append({"fields": {"hca_id": m.group(3).strip()}, "ports": []})
            continue
        if not devices:
            continue
        m_port = re.match(r"^\t\tport:\s*(\d+)", line)
        if m_port:
            devices[-1]["ports"].append({"fields": {}, "gids": []})
            continue
        m_gid = re.match(r"^\t+GID\[\s*(\d+)\]:\s*(\S+?)(?:, (RoCE v\d|IB))?$", line)
        if m_gid and devices[-1]["ports"]:
            devices[-1]["ports"][-1]["gids"].append((int(m_gid.group(1)), m_gid.group(2), m_gid.group(3)))
            continue
        if m:
            target = devices[-1]["ports"][-1]["fields"] if devices[-1]["ports"] else devices[-1]["fields"]
            target[m.group(2).strip()] = m.group(3).strip()
    return devices


def guid_text(value):
    h = f"{as_int(value):016x}"
    return ":".join(h[i:i + 4] for i in range(0, 16, 4))


def main():
    cli, profile_path = sys.argv[1], sys.argv[2]
    profile = json.load(open(profile_path))
    run = lambda *cmd: subprocess.run([cli, "run", "--profile", profile_path, "--", *cmd],
                                      capture_output=True, text=True, timeout=60)

    res = run("ibv_devinfo", "-v")
    if res.returncode != 0:
        sys.exit(f"ibv_devinfo -v failed ({res.returncode}): {res.stderr}")
    devices = parse_devinfo(res.stdout)
    check("number of devices", len(devices), len(profile["devices"]))
    for dev, want in zip(devices, profile["devices"]):
        f, a = dev["fields"], want["device"]
        name = want["name"]
        check(f"{name} hca_id", f.get("hca_id"), name)
        check(f"{name} fw_ver", f.get("fw_ver"), a["fw_ver"])
        check(f"{name} node_guid", f.get("node_guid"), guid_text(a["node_guid"]))
        check(f"{name} sys_image_guid", f.get("sys_image_guid"), guid_text(a["sys_image_guid"]))
        check(f"{name} board_id", f.get("board_id"), want.get("sysfs", {}).get("board_id"))
        check(f"{name} phys_port_cnt", printed_int(f.get("phys_port_cnt", "-1")), len(want["ports"]))
        check(f"{name} atomic_cap", printed_int(f.get("atomic_cap", "-1")), ATOMIC[a["atomic_cap"]])
        check(f"{name} num_comp_vectors", printed_int(f.get("num_comp_vectors", "-1")), want["num_comp_vectors"])
        for key in DEVICE_INTS:
            if key not in f:
                failures.append(f"{name} {key}: not printed by ibv_devinfo -v")
                continue
            check(f"{name} {key}", printed_int(f[key]), as_int(a[key]))
        check(f"{name} number of ports", len(dev["ports"]), len(want["ports"]))
        for i, (port, wp) in enumerate(zip(dev["ports"], want["ports"]), start=1):
            pf = port["fields"]
            where = f"{name} port {i}"
            check(f"{where} state", printed_int(pf.get("state", "-1")), PORT_STATE[wp["state"]])
            check(f"{where} max_mtu", printed_int(pf.get("max_mtu", "-1")), MTU[wp["max_mtu"]])
            check(f"{where} active_mtu", printed_int(pf.get("active_mtu", "-1")), MTU[wp["active_mtu"]])
            check(f"{where} link_layer", pf.get("link_layer"), wp["link_layer"])
            for printed, key in PORT_INTS:
                if printed not in pf:
                    failures.append(f"{where} {printed}: not printed by ibv_devinfo -v")
                    continue
                check(f"{where} {printed}", printed_int(pf[printed]), as_int(wp[key]))
            ethernet = wp["link_layer"] == "Ethernet"
            want_gids = [(n, ipaddress.IPv6Address(g["gid"]),
                          ("RoCE v2" if g["type"] == "RoCEv2" else "RoCE v1") if ethernet else None)
                         for n, g in enumerate(wp["gids"])]
            got_gids = [(n, ipaddress.IPv6Address(text), kind) for n, text, kind in port["gids"]]
            check(f"{where} GIDs", got_gids, want_gids)

    res = run("ibv_devices")
    if res.returncode != 0:
        sys.exit(f"ibv_devices failed ({res.returncode}): {res.stderr}")
    listed = re.findall(r"^\s+(\S+)\s+([0-9a-f]{16})$", res.stdout, re.M)
    check("ibv_devices", listed, [(d["name"], f"{as_int(d['device']['node_guid']):016x}") for d in profile["devices"]])

    for f in failures:
        print("MISMATCH", f)
    print(f"{profile_path}: {len(devices)} device(s) compared, {len(failures)} mismatch(es)")
    sys.exit(1 if failures or not devices else 0)


if __name__ == "__main__":
    main()
