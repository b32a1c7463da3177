"""How many CPUs this process may use: its affinity mask, capped by its cgroup's CPU quota.

A container's CPU limit is a quota (``cpu.max`` in cgroup v2, ``cpu.cfs_quota_us`` over
``cpu.cfs_period_us`` in v1), not an affinity mask: a pod limited to one CPU on a 16-core
node still sees 16 in ``os.sched_getaffinity``. Advice that depends on a second core
(``kafka.consumer_process``, docs/performance.md) needs both. A request below the limit
on a busy node is not visible from inside, so this is an upper bound.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import structlog

log = structlog.get_logger("capwatch.service")

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def usable_cpus(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float:
    """CPUs this process may run on: its affinity mask's size, or less if a CPU quota on
    its cgroup (or an ancestor's) allows less (e.g. 0.5 for a limit of 500m)."""
    try:
        cpus: float = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity call on this platform
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota(cgroup_root, proc_cgroup)
    return min(cpus, quota) if quota is not None else cpus


def warn_without_second_cpu(cpus: float | None = None) -> bool:
    """Say so (and return True) when ``kafka.consumer_process`` runs where this process may
    use fewer than 2 CPUs (``cpus``, else :func:`usable_cpus`): its two processes then
    share them and spend more CPU per record than one (docs/performance.md)."""
    cpus = usable_cpus() if cpus is None else cpus
    if cpus >= 2:
        return False
    log.warning("kafka.consumer_process is on but this process may use fewer than 2 CPUs: "
                "the consumer's process shares them and costs more CPU per record than "
                "reading in process (docs/performance.md, 'Choosing the Kafka client')",
                cpus=round(cpus, 2))
    return True


def cgroup_cpu_quota(cgroup_root: Path = CGROUP_ROOT,
                     proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The smallest CPU quota, in CPUs, on this process's cgroup and its ancestors (None
    without one, or where the files cannot be read)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    quotas: list[float] = []
    for line in lines:
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if controllers == "":  # cgroup v2: "0::/path"
            quotas += _quotas(cgroup_root, path, _v2_quota)
        elif "cpu" in controllers.split(","):  # cgroup v1: "4:cpu,cpuacct:/path"
            for mount in (cgroup_root / controllers, cgroup_root / "cpu",
                          cgroup_root / "cpu,cpuacct"):
                if mount.is_dir():
                    quotas += _quotas(mount, path, _v1_quota)
                    break
    return min(quotas) if quotas else None


def _quotas(mount: Path, path: str, read: Callable[[Path], float | None]) -> list[float]:
    """The quotas on ``path`` under ``mount`` and on each of its ancestors."""
    found = []
    here = mount / path.strip("/")
    while True:
        quota = read(here)
        if quota is not None:
            found.append(quota)
        if here == mount or mount not in here.parents:
            return found
        here = here.parent


def _v2_quota(directory: Path) -> float | None:
    try:
        quota, period = (directory / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return _ratio(quota, period)


def _v1_quota(directory: Path) -> float | None:
    try:
        quota = (directory / "cpu.cfs_quota_us").read_text().strip()
        period = (directory / "cpu.cfs_period_us").read_text().strip()
    except OSError:
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None  # -1 in v1: no quota
