#!/usr/bin/env python3
"""More stacks that HPC programs reach verbs through, unmodified, on the simulator, on an InfiniBand and a
RoCE profile: libfabric's verbs provider (fi_pingpong over its MSG, RDM (ofi_rxm, over RC and over XRC QPs) and
DGRAM endpoints, checking every byte); MPI (mpi_verbs_check.c: a ping-pong of 1 B to 4 MiB, MPI_Put/MPI_Get,
MPI_Allreduce, checking every byte) as Open MPI over UCX's rc_verbs, MPICH (ch4:ucx) over rc_verbs and Open
MPI's own openib BTL (InfiniBand only); and OpenSHMEM (shmem_verbs_check.c: puts and gets of 1 B to 4 MiB,
atomics, wait_until, a reduction) as Open MPI's oshmem over UCX.

usage: mpi_libfabric_check.py SIMVERBS_CLI FABRIC BASE_PORT MPI_CHECK_SOURCE SHMEM_CHECK_SOURCE

fi_pingpong's RDM endpoint asks for a CQ of 256 entries per peer of FI_UNIVERSE_SIZE (default 256), more
than any profile's max_cqe, and libfabric does not fit it to the device (it fails the same way on rxe);
FI_UNIVERSE_SIZE=32 makes it fit. MPI runs under `simverbs run --sysfs` (UCX uses a device only when its
/dev/infiniband node is there, openib only when /sys/class/infiniband lists it); where the machine gives no
mount namespace it is skipped and says so. Each MPI is named (mpicc.openmpi, mpiexec.mpich): `mpicc` is
whichever the alternatives system picked.
"""
import os
import re
import subprocess
import sys
import tempfile
import time

from tcp_listening import wait_listening

cli, fabric, base_port = sys.argv[1], sys.argv[2], int(sys.argv[3])
mpi_source, shmem_source = sys.argv[4], sys.argv[5]
failures = []
passed = 0
PROFILES = ("sim-roce", "sim-ib")


def fi_pingpong(profile, endpoint, port, xrc=False):
    """fi_pingpong -e endpoint between a server and a client (with `xrc`, RDM over XRC QPs with a shared
    receive context); both must exit 0 and the client must report every size it sent with all of them
    acknowledged."""
    global passed
    name = f"fi_pingpong -e {endpoint}{' over XRC' if xrc else ''} ({profile})"
    env = dict(os.environ, SIMVERBS_FABRIC=f"{fabric}-{profile}-{endpoint}{'-xrc' if xrc else ''}",
               FI_UNIVERSE_SIZE="32")
    if xrc:
        env.update(FI_VERBS_PREFER_XRC="1", FI_OFI_RXM_USE_SRX="1")
    common = ["fi_pingpong", "-p", "verbs", "-e", endpoint, "-I", "50", "-c"]
    server = subprocess.Popen([cli, "run", "--profile", profile, "--"] + common + ["-B", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if not wait_listening(port, server, time.time() + 20):
        server.kill()
        failures.append((name, "the server never listened", server.communicate()[0], ""))
        return
    client = subprocess.Popen([cli, "run", "--profile", profile, "--"] + common + ["-P", str(port), "127.0.0.1"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        client_out = client.communicate(timeout=60)[0]
        server_out = server.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        for p in (client, server):
            p.kill()
        failures.append((name, "timed out", server.communicate()[0], client.communicate()[0]))
        return
    # Its table: size, messages sent, "=" messages acknowledged, ... (a datagram's sizes end at the path MTU).
    table = re.findall(r"^\s*(\S+)\s+(\d+)\s+=(\d+)\s", client_out, re.M)
    rows = [size for size, sent, acked in table if sent == acked == "50"]
    if client.returncode != 0 or server.returncode != 0:
        failures.append((name, f"client exit {client.returncode}, server exit {server.returncode}", server_out,
                         client_out))
    elif len(rows) < 3 or len(rows) != len(table):
        failures.append((name, f"the client reported {len(table)} sizes, {len(rows)} with all 50 messages "
                         "acknowledged", server_out, client_out))
    else:
        passed += 1
        print(f"ok   {name}: sizes {' '.join(rows)}")


def mpi_run(name, profile, launcher, program, ucx, passed_line="mpi_verbs_check: PASS", zeroed=False):
    """Two ranks of `program` started by `launcher` under `simverbs run --sysfs`: it prints `passed_line`,
    and with `ucx`, UCX says it used rc_verbs on sim0 port 1. With `zeroed`, every block malloc returns is
    zero-filled (no per-thread cache, whose blocks glibc never fills, and MALLOC_PERTURB_=255, which fills
    with 0); otherwise MALLOC_PERTURB_ is whatever meson set."""
    global passed
    name = f"{name} ({profile})"
    env = dict(os.environ, SIMVERBS_FABRIC=f"{fabric}-{profile}-{launcher[0]}-{len(launcher)}")
    if zeroed:
        env.update(MALLOC_PERTURB_="255", GLIBC_TUNABLES="glibc.malloc.tcache_count=0")
    command = [cli, "run", "--profile", profile, "--sysfs", "--"] + launcher + [program]
    try:
        r = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    except subprocess.TimeoutExpired as e:
        failures.append((name, "timed out (120 s)", "", str(e.stdout or "")))
        return
    out = r.stdout + r.stderr
    if r.returncode != 0 or passed_line not in out:
        failures.append((name, f"exit {r.returncode}", "", out))
    elif ucx and "rc_verbs/sim0:1" not in out:
        failures.append((name, "UCX did not say it used rc_verbs on sim0:1", "", out))
    elif ucx and "failed to read /sys/class/infiniband" in out:
        failures.append((name, "UCX did not find a sysfs file of the device it reads (gid_attrs)", "", out))
    else:
        passed += 1
        print(f"ok   {name}")


UCX_ON_SIM0 = {"UCX_TLS": "rc_verbs,ud_verbs,self", "UCX_NET_DEVICES": "sim0:1", "UCX_LOG_LEVEL": "info"}
OPEN_MPI = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-np", "2"]


def open_mpi_ucx():
    command = OPEN_MPI + ["--mca", "pml", "ucx", "--mca", "osc", "ucx"]
    for key, value in UCX_ON_SIM0.items():
        command += ["-x", f"{key}={value}"]
    return command


def shmem_ucx():
    # Open MPI's OpenSHMEM: its one-sided layer (spml) over UCX as well.
    return ["oshrun"] + open_mpi_ucx()[1:] + ["--mca", "spml", "ucx"]


def mpich_ucx():
    # MPIR_CVAR_NOLOCAL: ranks on one host talk through the network module (UCX), not shared memory.
    command = ["mpiexec.mpich", "-n", "2", "-genv", "MPIR_CVAR_NOLOCAL", "1"]
    for key, value in UCX_ON_SIM0.items():
        command += ["-genv", key, value]
    return command


# Open MPI's own verbs transport (InfiniBand only: Debian builds it with the udcm connection method alone).
OPEN_MPI_OPENIB = OPEN_MPI + ["--mca", "pml", "ob1", "--mca", "btl", "openib,self", "--mca", "btl_openib_allow_ib",
                              "true", "--mca", "btl_openib_warn_no_device_params_found", "0", "--mca",
                              "btl_openib_warn_default_gid_prefix", "0"]

port = base_port
for profile in PROFILES:
    for endpoint in ("msg", "rdm", "dgram"):
        fi_pingpong(profile, endpoint, port)
        port += 1
    fi_pingpong(profile, "rdm", port, xrc=True)
    port += 1

namespace = subprocess.run([cli, "run", "--sysfs", "--", "true"], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, SIMVERBS_FABRIC=f"{fabric}-namespace"))
if namespace.returncode != 0:
    print(f"skip MPI: no mount namespace for simverbs run --sysfs here: {namespace.stderr.strip()}")
else:
    with tempfile.TemporaryDirectory() as tmp:
        programs = {}
        # (The OpenSHMEM program is not position-independent: Open MPI 4.1.4's memheap takes any anonymous
        # mapping below the program's end for static memory, so under PIE it registers the symmetric heap
        # a second time, and shmem_finalize then reads a cached key it freed (fixed upstream: "Static
        # segment creation always skips module-created segment"). With MALLOC_PERTURB_ that read crashes.)
        for mpi, compiler, flags, source in (("openmpi", "mpicc.openmpi", [], mpi_source),
                                             ("mpich", "mpicc.mpich", [], mpi_source),
                                             ("shmem", "oshcc", ["-no-pie"], shmem_source)):
            programs[mpi] = os.path.join(tmp, f"check.{mpi}")
            build = subprocess.run([compiler, "-O2"] + flags + ["-o", programs[mpi], source], capture_output=True,
                                   text=True, timeout=120)
            if build.returncode != 0:
                failures.append((f"{compiler} {os.path.basename(source)}", f"exit {build.returncode}", "",
                                 build.stdout + build.stderr))
                programs.pop(mpi)
        for profile in PROFILES:
            if "openmpi" in programs:
                mpi_run("Open MPI: pml ucx, osc ucx, rc_verbs", profile, open_mpi_ucx(), programs["openmpi"], True)
            if "mpich" in programs:
                mpi_run("MPICH ch4:ucx, rc_verbs", profile, mpich_ucx(), programs["mpich"], True)
            if "shmem" in programs:
                mpi_run("OpenSHMEM (Open MPI): spml ucx, rc_verbs", profile, shmem_ucx(), programs["shmem"], True,
                        "shmem_verbs_check: PASS")
        if "openmpi" in programs:
            # (Open MPI 4.1.4's openib never sets a device's allowed_btls (device_construct in
            # btl_openib_component.c); when malloc hands it a block holding something other than 0, the
            # device is never released and MPI_Finalize calls openib_dereg_mr after openib was unloaded:
            # SIGSEGV in the grdma cache's close. Zero-filled blocks keep that field 0.)
            mpi_run("Open MPI: pml ob1, btl openib", "sim-ib", OPEN_MPI_OPENIB, programs["openmpi"], False,
                    zeroed=True)

for name, why, server_out, client_out in failures:
    print(f"FAIL {name}: {why}\n--- server:\n{server_out[-3000:]}\n--- client:\n{client_out[-3000:]}")
print(f"{passed} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
