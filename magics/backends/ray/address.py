"""Is ``--address X`` the Ray cluster this kernel is already connected to? Compared by identity, not spelling.

Ray prints the head's address with the machine's LAN IP; users type ``127.0.0.1:PORT``, ``localhost:PORT``,
``auto`` or ``ray://HOST:CLIENT_PORT``. Two addresses name the same head when their hosts are the same machine
(every address of this machine — loopback, any interface's IP, its host name — counts as one; other hosts by
their resolved IPs) and their ports are equal. ``auto``/``local``/empty always mean the connected cluster. A
``ray://`` address (Ray Client) uses the client server's port, not the GCS port Ray reports for the connected
cluster, so for it (on either side) the hosts alone are compared.
"""

from __future__ import annotations

import socket

_connected: str = ""  # the address this kernel connected with (Ray Client mode reports no GCS address)


def remember_connection(address: str) -> None:
    global _connected
    _connected = address


def connected_address(ray) -> str:
    """The connected cluster's GCS address as Ray reports it, else the address we connected with."""
    try:
        address = ray.get_runtime_context().gcs_address
        if address:
            return address
    except Exception:
        pass
    return _connected if _connected not in ("", "auto", "local") else ""


def parse_address(address: str) -> tuple[str, int | None] | None:
    """(host, port or None) of ``HOST[:PORT]`` or ``ray://HOST:PORT``; None for ``auto``/``local``/empty."""
    text = address.strip()
    if not text or text in ("auto", "local"):
        return None
    if "://" in text:
        text = text.split("://", 1)[1]
    host, sep, port = text.rpartition(":")
    if not sep:
        return text.strip("[]"), None
    return host.strip("[]"), int(port) if port.isdigit() else None


def _local_ips() -> set[str]:
    import psutil

    ips: set[str] = set()
    for addresses in psutil.net_if_addrs().values():
        ips.update(a.address.split("%")[0] for a in addresses if a.family in (socket.AF_INET, socket.AF_INET6))
    return ips


def machine(host: str) -> frozenset[str]:
    """An identity for ``host``: {"this machine"} for any of our own addresses, else its resolved IPs."""
    try:
        ips = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except OSError:
        return frozenset({host})
    local = _local_ips()
    if any(ip.startswith("127.") or ip == "::1" or ip in local for ip in ips):
        return frozenset({"this machine"})
    return frozenset(ips)


def same_cluster(wanted: str, current: str) -> bool:
    want, have = parse_address(wanted), parse_address(current)
    if want is None or have is None:
        return True  # auto: whatever this kernel is connected to
    if not machine(want[0]) & machine(have[0]):
        return False
    client = wanted.strip().startswith("ray://") or current.strip().startswith("ray://")
    return client or want[1] == have[1]


def route_address(host: str) -> str:
    """This machine's address on the route to ``host`` (no packet is sent): where nodes reach the kernel's relay."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((host, 9))
            return sock.getsockname()[0]
        except OSError:
            return socket.gethostbyname(socket.gethostname())


def bind_host(advertise: str) -> str:
    """The address to bind a TCP socket the nodes reach at ``advertise``: that address itself when it is one of
    this machine's (so nothing listens on other interfaces), else every interface (``0.0.0.0``: an address
    behind NAT or a name that resolves elsewhere, e.g. ``relay_host`` set to a router's address)."""
    try:
        address = socket.gethostbyname(advertise)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
        return address
    except OSError:
        return "0.0.0.0"
