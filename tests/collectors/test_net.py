from __future__ import annotations

import shutil
from pathlib import Path

from gpulens.collectors.agent import Agent
from gpulens.collectors.net import NetReader, parse_ib_rate, parse_netdev

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def test_netdev_fixture_parsed_with_link_kind_and_speed() -> None:
    r = NetReader(FIX / "proc", FIX / "sys", exclude=r"^veth")
    by = {n.device: n for n in r.interfaces()}
    assert sorted(by) == ["eth0", "eth1", "ib0", "lo"]
    eth0 = by["eth0"]
    assert (eth0.rx_bytes, eth0.rx_packets, eth0.rx_errors, eth0.rx_drops) == (987654321012, 812345678, 3, 7)
    assert (eth0.tx_bytes, eth0.tx_packets, eth0.tx_errors, eth0.tx_drops) == (123456789012, 98765432, 1, 2)
    assert eth0.link_kind == "ethernet" and eth0.speed_mbps == 100000
    assert by["lo"].link_kind == "loopback" and by["lo"].speed_mbps is None
    assert by["eth1"].speed_mbps is None  # -1 = link down / unknown
    assert by["ib0"].link_kind == "infiniband"


def test_exclude_none_keeps_virtual_interfaces() -> None:
    names = [n.device for n in NetReader(FIX / "proc", FIX / "sys").interfaces()]
    assert "veth1a2b3c" in names


def test_infiniband_words_times_four() -> None:
    ports = {(p.device, p.port): p for p in NetReader(FIX / "proc", FIX / "sys").infiniband()}
    assert sorted(ports) == [("mlx5_0", 1), ("mlx5_1", 1)]
    p = ports[("mlx5_0", 1)]
    assert p.rx_bytes == 2500000000 * 4 and p.tx_bytes == 3000000000 * 4
    assert (p.symbol_errors, p.link_downed, p.tx_drops) == (5, 1, 2)
    assert p.speed_mbps == 200000


def test_parsers_on_odd_input() -> None:
    assert parse_ib_rate("2.5 Gb/sec (1X SDR)") == 2500
    assert parse_ib_rate("garbage") is None
    assert parse_netdev("h1\nh2\n bad line\n x: 1 2 3\n") == []


def test_missing_roots_give_nothing(tmp_path: Path) -> None:
    r = NetReader(tmp_path / "noproc", tmp_path / "nosys")
    assert r.interfaces() == [] and r.infiniband() == []


def _set(path: Path, value: int) -> None:
    path.write_text(f"{value}\n")


def test_counter_wrap_and_reset_in_agent_rates(tmp_path: Path) -> None:
    proc, sysfs = tmp_path / "proc", tmp_path / "sys"
    shutil.copytree(FIX / "proc", proc)
    shutil.copytree(FIX / "sys", sysfs)
    now = [0.0]
    agent = Agent(node="n1", backend=None, net=NetReader(proc, sysfs), resolver=None, sink=None,
                  clock=lambda: now[0], wall=lambda: 1.7e9 + now[0])
    agent.tick()
    # eth1 rx is a 32-bit hardware counter at 4294967000: it wraps to 704 (1000 bytes later)
    dev = (proc / "net" / "dev").read_text().replace("4294967000", "704       ")
    (proc / "net" / "dev").write_text(dev)
    counters = sysfs / "class/infiniband/mlx5_0/ports/1/counters"
    _set(counters / "port_rcv_data", 2500000000 + 250)  # +1000 bytes
    _set(counters / "symbol_error", 0)  # reset (e.g. perfquery -R): total must not go down
    now[0] = 10.0
    res = agent.tick()
    net = {(r["device"], r["port"]): r for r in res.rows["net"]}
    assert net[("eth1", None)]["rx_bps"] == 100.0  # 1000 bytes / 10 s: no negative, no spike
    assert net[("eth1", None)]["rx_bytes_total"] == 4294967000 + 1000
    ib = net[("mlx5_0", 1)]
    assert ib["link_kind"] == "infiniband" and ib["rx_bps"] == 100.0
    assert ib["symbol_errors_total"] == 5
    for r in res.rows["net"]:
        for k in ("rx_bps", "tx_bps"):
            assert r[k] is None or r[k] >= 0
