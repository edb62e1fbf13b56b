"""Whether a perftest or pingpong server listens on its TCP port yet, read from /proc (connecting to find
out would be taken by the server as its client)."""
import time


def listening(port):
    """True if a socket listens on the TCP port."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def wait_listening(port, proc, deadline):
    """Waits until the port listens, `proc` (the server) exits, or the deadline passes."""
    while time.time() < deadline and proc.poll() is None:
        if listening(port):
            return True
        time.sleep(0.02)
    return False
