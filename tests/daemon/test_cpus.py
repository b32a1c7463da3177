"""capwatch.daemon.cpus: the CPUs a process may use, from its affinity and its cgroup's quota
(files laid out as cgroup v1 and v2 mount them), and the warning for kafka.consumer_process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from capwatch.daemon.cpus import cgroup_cpu_quota, usable_cpus, warn_without_second_cpu


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _proc(tmp_path: Path, text: str) -> Path:
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(text)
    return proc


def test_v2_quota_of_the_process_cgroup(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    _write(root / "kubepods" / "pod1" / "cpu.max", "150000 100000\n")
    proc = _proc(tmp_path, "0::/kubepods/pod1\n")
    assert cgroup_cpu_quota(root, proc) == 1.5


def test_v2_the_smallest_quota_of_the_cgroup_and_its_ancestors(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    _write(root / "kubepods" / "cpu.max", "50000 100000\n")
    _write(root / "kubepods" / "pod1" / "cpu.max", "max 100000\n")
    proc = _proc(tmp_path, "0::/kubepods/pod1\n")
    assert cgroup_cpu_quota(root, proc) == 0.5


def test_v2_no_quota(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    _write(root / "cpu.max", "max 100000\n")
    assert cgroup_cpu_quota(root, _proc(tmp_path, "0::/\n")) is None


def test_v1_quota_and_no_quota(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    mount = root / "cpu,cpuacct"
    _write(mount / "docker" / "c1" / "cpu.cfs_quota_us", "300000\n")
    _write(mount / "docker" / "c1" / "cpu.cfs_period_us", "100000\n")
    _write(mount / "cpu.cfs_quota_us", "-1\n")
    _write(mount / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_quota(root, _proc(tmp_path, "4:cpu,cpuacct:/docker/c1\n1:memory:/\n")) \
        == 3.0
    assert cgroup_cpu_quota(root, _proc(tmp_path, "4:cpu,cpuacct:/\n")) is None


def test_unreadable_or_odd_files_mean_no_quota(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    _write(root / "cpu.max", "not numbers\n")
    assert cgroup_cpu_quota(root, _proc(tmp_path, "0::/\n")) is None
    assert cgroup_cpu_quota(root, tmp_path / "missing") is None


def test_usable_cpus_is_the_affinity_capped_by_the_quota(tmp_path: Path) -> None:
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no affinity call on this platform")
    affinity = len(os.sched_getaffinity(0))
    root = tmp_path / "cg"
    _write(root / "cpu.max", "25000 100000\n")
    assert usable_cpus(root, _proc(tmp_path, "0::/\n")) == 0.25
    _write(root / "cpu.max", f"{(affinity + 4) * 100000} 100000\n")
    assert usable_cpus(root, _proc(tmp_path, "0::/\n")) == affinity


def test_the_warning_below_two_cpus_only() -> None:
    with capture_logs() as logs:
        assert warn_without_second_cpu(1.0)
        assert not warn_without_second_cpu(2.0)
    assert [(e["log_level"], e["cpus"]) for e in logs] == [("warning", 1.0)]
    assert "consumer_process" in logs[0]["event"]
