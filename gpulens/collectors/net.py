"""Network counters: ``/proc/net/dev`` + ``/sys/class/net`` and InfiniBand port counters.

Readers take injectable roots so tests read checked-in fixture trees. All values
are the kernel's cumulative counters; rates come from gpulens.collectors.rates.
InfiniBand ``port_rcv_data``/``port_xmit_data`` count 4-byte words (octets / 4),
so they are multiplied by 4 here.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

__all__ = ["IbPort", "NetCounters", "NetReader", "parse_ib_rate", "parse_netdev", "read_bytes"]

_LINK_KINDS = {"1": "ethernet", "772": "loopback", "32": "infiniband"}
_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")


@dataclasses.dataclass(frozen=True)
class NetCounters:
    device: str
    rx_bytes: int
    rx_packets: int
    rx_errors: int
    rx_drops: int
    tx_bytes: int
    tx_packets: int
    tx_errors: int
    tx_drops: int
    link_kind: str = "other"
    speed_mbps: int | None = None


@dataclasses.dataclass(frozen=True)
class IbPort:
    device: str
    port: int
    rx_bytes: int | None
    tx_bytes: int | None
    rx_packets: int | None
    tx_packets: int | None
    rx_errors: int | None
    tx_drops: int | None  # port_xmit_discards
    symbol_errors: int | None
    link_downed: int | None
    speed_mbps: int | None


def parse_netdev(text: str) -> list[tuple[str, list[int]]]:
    """Rows of /proc/net/dev: (interface, 16 counters in kernel order)."""
    out: list[tuple[str, list[int]]] = []
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        fields = rest.split()
        if len(fields) < 16:
            continue
        try:
            out.append((name.strip(), [int(f) for f in fields[:16]]))
        except ValueError:
            continue
    return out


def parse_ib_rate(text: str) -> int | None:
    """``"100 Gb/sec (4X EDR)"`` -> 100000 (Mbit/s)."""
    m = _RATE.match(text)
    return None if m is None else int(float(m.group(1)) * 1000)


def read_bytes(path: str, limit: int = 1 << 20) -> bytes | None:
    """Contents of a small procfs/sysfs file (os.open/os.read: cheaper than open()), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # ENOENT, EACCES ...
        return None
    try:
        chunks = []
        size = 0
        while size < limit:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError:  # EINVAL reading speed of a down link or lo
        return None
    finally:
        os.close(fd)


def _read(path: str) -> str | None:
    data = read_bytes(path)
    return None if data is None else data.decode("ascii", errors="replace")


def _read_int(path: str) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


class NetReader:
    """Reads interface and InfiniBand counters under ``proc_root`` and ``sysfs_root``."""

    def __init__(
        self,
        proc_root: str | os.PathLike[str] = "/proc",
        sysfs_root: str | os.PathLike[str] = "/sys",
        *,
        exclude: str | None = None,
    ) -> None:
        self.proc_root = Path(proc_root)
        self.sysfs_root = Path(sysfs_root)
        self._netdev = str(self.proc_root / "net" / "dev")
        self._classnet = str(self.sysfs_root / "class" / "net")
        self._ib = self.sysfs_root / "class" / "infiniband"
        self._exclude = re.compile(exclude) if exclude else None
        self._kinds: dict[str, str] = {}
        self._ib_ports: list[tuple[str, int, str]] | None = None

    def interfaces(self) -> list[NetCounters]:
        text = _read(self._netdev)
        if text is None:
            return []
        out: list[NetCounters] = []
        for name, f in parse_netdev(text):
            if self._exclude is not None and self._exclude.search(name):
                continue
            base = f"{self._classnet}/{name}"
            kind = self._kinds.get(name)
            if kind is None:
                raw = _read(f"{base}/type")
                kind = _LINK_KINDS.get(raw.strip(), "other") if raw is not None else "other"
                self._kinds[name] = kind
            speed = _read_int(f"{base}/speed") if kind != "loopback" else None
            out.append(
                NetCounters(
                    name, f[0], f[1], f[2], f[3], f[8], f[9], f[10], f[11],
                    kind, speed if speed is not None and speed > 0 else None,
                )
            )
        return out

    def _discover_ib(self) -> list[tuple[str, int, str]]:
        ports: list[tuple[str, int, str]] = []
        try:
            devs = sorted(os.listdir(self._ib))
        except OSError:
            return ports
        for dev in devs:
            try:
                nums = sorted(int(p) for p in os.listdir(self._ib / dev / "ports") if p.isdigit())
            except OSError:
                continue
            for n in nums:
                ports.append((dev, n, str(self._ib / dev / "ports" / str(n))))
        return ports

    def infiniband(self, *, rediscover: bool = False) -> list[IbPort]:
        if self._ib_ports is None or rediscover:
            self._ib_ports = self._discover_ib()
        out: list[IbPort] = []
        for dev, port, base in self._ib_ports:
            c = f"{base}/counters"
            rcv, xmit = _read_int(f"{c}/port_rcv_data"), _read_int(f"{c}/port_xmit_data")
            rate = _read(f"{base}/rate")
            out.append(
                IbPort(
                    dev,
                    port,
                    None if rcv is None else rcv * 4,
                    None if xmit is None else xmit * 4,
                    _read_int(f"{c}/port_rcv_packets"),
                    _read_int(f"{c}/port_xmit_packets"),
                    _read_int(f"{c}/port_rcv_errors"),
                    _read_int(f"{c}/port_xmit_discards"),
                    _read_int(f"{c}/symbol_error"),
                    _read_int(f"{c}/link_downed"),
                    None if rate is None else parse_ib_rate(rate),
                )
            )
        return out
