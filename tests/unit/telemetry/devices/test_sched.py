"""The scheduler's account (telemetry/devices/sched.py) read from fake /proc and /sys trees laid out
as the kernel's: schedstat, cgroup v1 and v2 cpu.stat with their quotas, PSI; what a platform
lacks is said and never recorded as 0."""

import threading

import pytest

from telemetry.devices.sched import (
    CgroupCpuSource,
    PressureSource,
    ThreadSchedSource,
    Unavailable,
    build_sched_sources,
)

PID, TID = 4242, 4250


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def schedstat(proc, run_ns, wait_ns, slices=10):
    write(proc / str(PID) / "task" / str(TID) / "schedstat", f"{run_ns} {wait_ns} {slices}\n")


def test_run_queue_delay_of_the_training_thread_as_rates_over_the_interval(tmp_path):
    clock = Clock()
    schedstat(tmp_path, 5_000_000_000, 1_000_000_000)
    src = ThreadSchedSource(TID, PID, proc=str(tmp_path), clock=clock)
    schedstat(tmp_path, 5_600_000_000, 1_310_000_000)  # 1 s later: ran 0.6 s, waited 0.31 s
    clock.t += 1.0
    out = src.read()
    assert out["cpu_running_ratio"] == pytest.approx(0.6)
    assert out["cpu_runqueue_wait_ratio"] == pytest.approx(0.31)
    assert out["cpu_runqueue_wait_seconds"] == pytest.approx(1.31)


def test_a_thread_that_ended_records_nothing_more(tmp_path):
    clock = Clock()
    schedstat(tmp_path, 1, 1)
    src = ThreadSchedSource(TID, PID, proc=str(tmp_path), clock=clock)
    (tmp_path / str(PID) / "task" / str(TID) / "schedstat").unlink()
    clock.t += 1.0
    assert src.read() == {} and src.read() == {}


def test_no_schedstat_or_a_kernel_without_sched_info_is_unavailable_not_zero(tmp_path):
    with pytest.raises(Unavailable, match="cannot be read"):
        ThreadSchedSource(TID, PID, proc=str(tmp_path))
    schedstat(tmp_path, 5_000_000, 0, 0)  # runs, yet never queued nor counted: sched_info is off
    with pytest.raises(Unavailable, match="no run-queue delay"):
        ThreadSchedSource(TID, PID, proc=str(tmp_path))


V1_MOUNTINFO = """\
25 1 0:23 / / rw,relatime - overlay overlay rw
30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
32 30 0:28 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
33 30 0:29 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_CGROUP = "4:cpuset:/\n3:cpu,cpuacct:/job/rank1\n0::/\n"


def v1_tree(tmp_path, periods, throttled, throttled_ns, quota="50000"):
    proc, fs = tmp_path / "proc", tmp_path / "fs"
    write(proc / "self" / "mountinfo", V1_MOUNTINFO)
    write(proc / "self" / "cgroup", V1_CGROUP)
    d = fs / "sys/fs/cgroup/cpu,cpuacct/job/rank1"
    write(
        d / "cpu.stat",
        f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_time {throttled_ns}\nnr_bursts 0\nburst_time 0\n",
    )
    write(d / "cpu.cfs_quota_us", f"{quota}\n")
    write(d / "cpu.cfs_period_us", "100000\n")
    write(fs / "sys/fs/cgroup/unified/cpu.stat", "usage_usec 10\nuser_usec 5\nsystem_usec 5\n")
    return str(proc), str(fs)


def test_cgroup_v1_throttling_and_quota(tmp_path):
    clock = Clock()
    proc, fs = v1_tree(tmp_path, 100, 10, 2_000_000_000)
    src = CgroupCpuSource(proc, fs, clock=clock)
    assert src.version == 1 and src.dir.endswith("cpu,cpuacct/job/rank1")
    v1_tree(tmp_path, 110, 16, 2_300_000_000)  # a second: 10 periods, 6 throttled, 0.3 s throttled
    clock.t += 1.0
    out = src.read()
    assert out["cpu_throttled_ratio"] == pytest.approx(0.3)
    assert out["cpu_throttled_periods_ratio"] == pytest.approx(0.6)
    assert out["cpu_throttled_periods"] == 16 and out["cpu_throttled_seconds"] == pytest.approx(2.3)
    assert out["cpu_quota_cores"] == pytest.approx(0.5)


def test_no_quota_is_no_quota_reading_and_throttling_stays_a_true_zero(tmp_path):
    clock = Clock()
    proc, fs = v1_tree(tmp_path, 0, 0, 0, quota="-1")
    src = CgroupCpuSource(proc, fs, clock=clock)
    clock.t += 1.0
    out = src.read()
    assert "cpu_quota_cores" not in out and out["cpu_throttled_ratio"] == 0.0
    assert "cpu_throttled_periods_ratio" not in out  # no period ran: no share to give


def test_cgroup_v2_with_a_namespace_root_and_cpu_max(tmp_path):
    clock = Clock()
    proc, fs = tmp_path / "proc", tmp_path / "fs"
    # a cgroup namespace: the mount's root is the container's cgroup, /proc/self/cgroup is relative to it
    write(proc / "self" / "mountinfo", "40 30 0:30 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    write(proc / "self" / "cgroup", "0::/kubepods/pod1/ctr\n")
    d = fs / "sys/fs/cgroup/ctr"
    write(d / "cpu.stat", "usage_usec 1\nnr_periods 50\nnr_throttled 5\nthrottled_usec 100000\n")
    write(d / "cpu.max", "150000 100000\n")
    src = CgroupCpuSource(str(proc), str(fs), clock=clock)
    assert src.version == 2
    write(d / "cpu.stat", "usage_usec 2\nnr_periods 60\nnr_throttled 10\nthrottled_usec 350000\n")
    clock.t += 0.5
    out = src.read()
    assert out["cpu_throttled_ratio"] == pytest.approx(0.5)
    assert out["cpu_throttled_periods_ratio"] == pytest.approx(0.5)
    assert out["cpu_quota_cores"] == pytest.approx(1.5)


def test_cgroup_v2_without_the_cpu_controller_is_unavailable(tmp_path):
    proc, fs = tmp_path / "proc", tmp_path / "fs"
    write(proc / "self" / "mountinfo", "40 30 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    write(proc / "self" / "cgroup", "0::/user.slice\n")
    write(fs / "sys/fs/cgroup/user.slice/cpu.stat", "usage_usec 1\nuser_usec 1\nsystem_usec 0\n")
    with pytest.raises(Unavailable, match="no throttling counters"):
        CgroupCpuSource(str(proc), str(fs))
    write(proc / "self" / "mountinfo", "25 1 0:23 / / rw - ext4 /dev/sda1 rw\n")
    with pytest.raises(Unavailable, match="no cgroup CPU controller"):
        CgroupCpuSource(str(proc), str(fs))


def test_a_process_moved_to_another_cgroup_is_followed_with_no_rate_across_the_move(tmp_path):
    clock = Clock()
    proc, fs = v1_tree(tmp_path, 100, 10, 2_000_000_000, quota="-1")
    src = CgroupCpuSource(proc, fs, clock=clock)
    other = tmp_path / "fs/sys/fs/cgroup/cpu,cpuacct/slow"
    write(other / "cpu.stat", "nr_periods 7\nnr_throttled 7\nthrottled_time 900000000\n")
    write(other / "cpu.cfs_quota_us", "20000\n")
    write(other / "cpu.cfs_period_us", "100000\n")
    write(tmp_path / "proc/self/cgroup", "3:cpu,cpuacct:/slow\n0::/\n")
    clock.t += 1.0
    out = src.read()
    assert "cpu_throttled_ratio" not in out and out["cpu_quota_cores"] == pytest.approx(0.2)
    write(other / "cpu.stat", "nr_periods 17\nnr_throttled 15\nthrottled_time 1500000000\n")
    clock.t += 1.0
    out = src.read()
    assert out["cpu_throttled_ratio"] == pytest.approx(0.6) and out["cpu_throttled_periods_ratio"] == 0.8


def test_cpu_pressure_from_psi_totals(tmp_path):
    clock = Clock()
    psi = tmp_path / "pressure" / "cpu"
    write(psi, "some avg10=1.00 avg60=1.00 avg300=1.00 total=1000000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    src = PressureSource(str(tmp_path), clock=clock)
    write(psi, "some avg10=9.00 avg60=2.00 avg300=1.00 total=1250000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    clock.t += 2.0
    assert src.read() == {"cpu_pressure_some_ratio": pytest.approx(0.125)}
    with pytest.raises(Unavailable):
        PressureSource(str(tmp_path / "nowhere"))


def test_this_machine_says_once_what_it_lacks_and_reads_the_rest():
    said = []
    sources = build_sched_sources(threading.get_native_id(), said.append)
    assert len(sources) + len(said) == 3  # each reading is either there or said once
    for src in sources:
        src.read()
    assert build_sched_sources(None, said.append) is not None
    assert any("training thread is not known" in s for s in said)
