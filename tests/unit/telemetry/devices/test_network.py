"""The node's RDMA NIC counters (telemetry/devices/network.py) read from a fake sysfs tree laid out as
the kernel's (/sys/class/infiniband/<dev>/ports/<port>/counters/<counter>): node totals over every
port, monotone through resets and removed devices; a machine without RDMA devices says so once and
records nothing."""

import logging
import shutil
import types

import pytest

from telemetry.devices import network
from telemetry.devices.network import NicSource, Unavailable, build_network_sources

DEVICES = {"mlx5_0": ("1", "2"), "mlx5_1": ("1", "2")}  # two devices, two ports each
MESSAGE = "no RDMA NICs under {}/class/infiniband: network counters off"


def counters(root, dev, port, **values):
    d = root / "class" / "infiniband" / dev / "ports" / port / "counters"
    d.mkdir(parents=True, exist_ok=True)
    for name, v in values.items():
        (d / name).write_text(f"{v}\n")
    return d


def node(root, words=0, errors=0):
    """Every port of DEVICES with data counters of ``words`` words and symbol errors ``errors``."""
    for dev, ports in DEVICES.items():
        for port in ports:
            counters(root, dev, port, port_xmit_data=words, port_rcv_data=2 * words, symbol_error=errors, link_downed=0)


def test_node_totals_over_every_port_in_bytes_growing_from_start(tmp_path):
    node(tmp_path, words=1000, errors=3)  # before telemetry started: not counted
    src = NicSource(str(tmp_path))
    assert src.read() == {
        "nic_bytes_tx": 0.0,
        "nic_bytes_rx": 0.0,
        "nic_errors_symbol_error": 0.0,
        "nic_errors_link_downed": 0.0,
    }
    node(tmp_path, words=1500, errors=5)  # each of 4 ports: 500 words sent, 1000 received, 2 errors
    out = src.read()
    assert out["nic_bytes_tx"] == 4 * 500 * 4 and out["nic_bytes_rx"] == 4 * 1000 * 4
    assert out["nic_errors_symbol_error"] == 4 * 2 and out["nic_errors_link_downed"] == 0
    assert "nic_errors_port_rcv_errors" not in out  # only the counters the ports have


def test_a_reset_or_a_device_added_again_never_makes_a_total_go_back(tmp_path):
    node(tmp_path, words=1000, errors=10)
    src = NicSource(str(tmp_path), rescan_every=5)
    src.read()
    counters(tmp_path, "mlx5_0", "1", port_xmit_data=100, symbol_error=1)  # reset, then 100 words and 1 error
    out = src.read()
    assert out["nic_bytes_tx"] == 100 * 4 and out["nic_errors_symbol_error"] == 1
    counters(tmp_path, "mlx5_0", "1", port_xmit_data=150, symbol_error=1)  # and on from there
    assert src.read()["nic_bytes_tx"] == 150 * 4
    # a device removed: its files fail once, the ports are listed again, the totals stay
    shutil.rmtree(tmp_path / "class" / "infiniband" / "mlx5_1")
    assert src.read()["nic_bytes_tx"] == 150 * 4 and src.failures == 2 * 4  # 2 ports x 4 files
    # ... and added again with its counters from 0: counted from its first value, never negative
    for port in ("1", "2"):
        counters(tmp_path, "mlx5_1", port, port_xmit_data=7, port_rcv_data=7, symbol_error=0, link_downed=0)
    assert src.read()["nic_bytes_tx"] == 150 * 4 and src.failures == 8  # the 5th reading lists the ports
    counters(tmp_path, "mlx5_1", "1", port_xmit_data=17)
    assert src.read()["nic_bytes_tx"] == (150 + 10) * 4


def test_an_unreadable_counter_is_skipped_said_once_and_counted_when_it_reads_again(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="telemetry")
    node(tmp_path, words=1000)
    src = NicSource(str(tmp_path))
    for dev, ports in DEVICES.items():
        for port in ports:
            counters(tmp_path, dev, port, port_xmit_data=1100)
    bad = counters(tmp_path, "mlx5_1", "2") / "port_xmit_data"
    bad.write_text("garbage\n")
    for _ in range(3):
        out = src.read()
        assert out["nic_bytes_tx"] == 3 * 100 * 4  # the three ports it can read
    assert src.failures == 3 and caplog.text.count("cannot be read") == 1
    bad.write_text("1300\n")  # reads again: its growth since its last good value counts
    assert src.read()["nic_bytes_tx"] == (3 * 100 + 300) * 4
    # a reading none of whose files can be read is left out, not a false 0
    for dev, ports in DEVICES.items():
        for port in ports:
            (counters(tmp_path, dev, port) / "symbol_error").write_text("?\n")
    out = src.read()
    assert "nic_errors_symbol_error" not in out and "nic_bytes_tx" in out


def test_a_port_that_appears_later_is_counted_from_its_first_value(tmp_path):
    counters(tmp_path, "mlx5_0", "1", port_xmit_data=0, port_rcv_data=0)
    src = NicSource(str(tmp_path), rescan_every=3)
    src.read()
    counters(tmp_path, "mlx5_0", "2", port_xmit_data=5000, port_rcv_data=0, symbol_error=2)  # a new port
    assert "nic_errors_symbol_error" not in src.read()  # not seen before the ports are listed again
    out = src.read()  # the 3rd reading lists them again: counted from its first value
    assert out["nic_bytes_tx"] == 0 and out["nic_errors_symbol_error"] == 0
    counters(tmp_path, "mlx5_0", "2", port_xmit_data=5010, symbol_error=3)
    out = src.read()
    assert out["nic_bytes_tx"] == 40 and out["nic_errors_symbol_error"] == 1


def test_a_saturated_counter_is_said_once(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="telemetry")
    counters(tmp_path, "mlx5_0", "1", port_xmit_data=10, symbol_error=65535)
    src = NicSource(str(tmp_path))
    src.read(), src.read()
    assert caplog.text.count("symbol_error is at its maximum (65535)") == 1


def sampler_with(monkeypatch, root):
    """build_sampler's sources and what its first sample emitted, its NIC counters read under ``root``."""
    from telemetry.devices import sampler

    real = network.build_network_sources
    monkeypatch.setattr(sampler, "build_network_sources", lambda say: real(say, root=str(root)))
    emitted = []
    recorder = types.SimpleNamespace(emit=emitted.append, now=lambda: 0.0)
    s, _ = sampler.build_sampler(recorder, types.SimpleNamespace(device_interval_s=60.0, gpu=False), 0)
    s.stop()
    return s.sources, [e[2] for e in emitted]


def test_no_rdma_devices_is_said_once_and_no_source_is_built(tmp_path, caplog, monkeypatch):
    said = []
    assert build_network_sources(said.append, root=str(tmp_path)) == []
    assert said == [MESSAGE.format(tmp_path)]
    (tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1").mkdir(parents=True)  # a device, no counters
    with pytest.raises(Unavailable, match="but no port counters"):
        NicSource(str(tmp_path))

    # through the sampler: one info line, no source, no nic_ reading
    empty = tmp_path / "empty"
    empty.mkdir()
    caplog.set_level(logging.INFO, logger="telemetry")
    sources, emitted = sampler_with(monkeypatch, empty)
    assert caplog.text.count(MESSAGE.format(empty)) == 1
    assert not any(isinstance(src, NicSource) for src in sources)
    assert not any(k.startswith("nic_") for values in emitted for k in values)


def test_the_sampler_builds_it_on_a_node_with_rdma_devices(tmp_path, monkeypatch):
    node(tmp_path, words=10)
    sources, emitted = sampler_with(monkeypatch, tmp_path)
    assert sum(isinstance(src, NicSource) for src in sources) == 1
    assert emitted[0]["nic_bytes_tx"] == 0.0 and emitted[0]["nic_errors_symbol_error"] == 0.0
