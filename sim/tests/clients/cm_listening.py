"""Whether a simulated rdma_cm listener is up: the simulator's CM listens on an abstract Unix socket
named after the user, the fabric and the port, which shows in /proc/net/unix."""


def listening(port, fabric):
    """Another fabric's listener on the same port (tests run in parallel) does not count."""
    suffix = f"-{port}"
    infix = f"-{fabric}-"
    try:
        lines = open("/proc/net/unix").read().splitlines()[1:]
    except OSError:
        return False
    for line in lines:
        fields = line.split()
        # Flags 00010000: a listening socket.
        if len(fields) >= 8 and fields[3] == "00010000" and fields[7].startswith("@simverbs-cm-") and \
                infix in fields[7] and fields[7].endswith(suffix):
            return True
    return False
