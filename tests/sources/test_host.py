"""The host source: who each GPU process is, what its DataLoader workers are doing, which
container, pod or Slurm job it belongs to, and how loaded the node is.

Process facts come from real processes spawned here; cgroup, environ and PSI files are written
into a temporary proc root with the layouts real container runtimes and schedulers produce.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gputop.model import UNSUPPORTED, JobInfo, Missing, ProcessSample
from gputop.sources import host
from gputop.sources.cpu_start import CpuStart, read_cpu_start
from gputop.sources.host import HostSource

ME = os.getpid()
# Above PID_MAX_LIMIT (2**22): no process here can have it, as for a host PID seen from a container.
HOST_ONLY_PID = 4_194_400

CTR = "4f8e1c2a9b7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f"
POD_UID = "6b7f9d3e-2c41-4a8e-9f10-3d5c7b2a1e44"
POD_SLICE_UID = POD_UID.replace("-", "_")


def gpu_process(pid: int, device: int = 0, gpu_mem: int = 2 << 30) -> ProcessSample:
    """A process as NVML reports it: GPU-side facts only."""
    return ProcessSample(pid=pid, device_index=device, gpu_mem=gpu_mem)


def proc_root_with(tmp_path: Path, pid: int, cgroup: str, environ: dict[str, str] | None = None
                   ) -> str:
    """A /proc where `pid` lives (its real stat and statm) in the given cgroup, with the given
    env."""
    d = tmp_path / str(pid)
    d.mkdir(parents=True)
    for name in ("stat", "statm"):
        (d / name).write_bytes(Path(f"/proc/{pid}/{name}").read_bytes())
    (d / "cgroup").write_text(cgroup)
    if environ is not None:
        (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0"
                                             for k, v in environ.items()))
    return str(tmp_path)


def enrich_one(source: HostSource, pid: int) -> ProcessSample:
    (out,) = source.enrich([gpu_process(pid)], time.time())
    return out


# ----------------------------------------------------------------------------------------------
# Which container, pod or job a GPU process belongs to


DOCKER_CGROUP_V1 = "".join(f"{line}\n" for line in [
    f"12:pids:/docker/{CTR}",
    f"11:hugetlb:/docker/{CTR}",
    f"10:net_cls,net_prio:/docker/{CTR}",
    f"9:perf_event:/docker/{CTR}",
    f"8:memory:/docker/{CTR}",
    f"7:devices:/docker/{CTR}",
    f"6:blkio:/docker/{CTR}",
    f"5:cpuset:/docker/{CTR}",
    f"4:freezer:/docker/{CTR}",
    "3:rdma:/",
    f"2:cpu,cpuacct:/docker/{CTR}",
    f"1:name=systemd:/docker/{CTR}",
    "0::/",
])
SLURM_STEP_CGROUP_V1 = "".join(f"{line}\n" for line in [
    "11:devices:/slurm/uid_1000/job_4242/step_0/task_0",
    "10:cpuacct,cpu:/system.slice/slurmd.service",
    "7:memory:/slurm/uid_1000/job_4242/step_0/task_0",
    "5:cpuset:/slurm/uid_1000/job_4242/step_0",
    "4:freezer:/slurm/uid_1000/job_4242/step_0",
    "1:name=systemd:/system.slice/slurmd.service",
    "0::/",
])

JOB_CASES = [
    pytest.param(DOCKER_CGROUP_V1,
                 JobInfo(container_id=CTR, container_runtime="docker"),
                 f"docker:{CTR[:12]}", id="docker-cgroup-v1"),
    pytest.param(f"0::/system.slice/docker-{CTR}.scope\n",
                 JobInfo(container_id=CTR, container_runtime="docker"),
                 f"docker:{CTR[:12]}", id="docker-cgroup-v2-systemd"),
    pytest.param("0::/kubepods.slice/kubepods-besteffort.slice/"
                 f"kubepods-besteffort-pod{POD_SLICE_UID}.slice/cri-containerd-{CTR}.scope\n",
                 JobInfo(container_id=CTR, container_runtime="containerd", pod_uid=POD_UID),
                 "pod:6b7f9d3e", id="k8s-containerd-cgroup-v2"),
    pytest.param(f"0::/kubepods.slice/kubepods-burstable.slice/"
                 f"kubepods-burstable-pod{POD_SLICE_UID}.slice/crio-{CTR}.scope\n",
                 JobInfo(container_id=CTR, container_runtime="cri-o", pod_uid=POD_UID),
                 "pod:6b7f9d3e", id="k8s-cri-o-cgroup-v2"),
    pytest.param(f"9:memory:/kubepods/burstable/pod{POD_UID}/{CTR}\n"
                 f"1:name=systemd:/kubepods/burstable/pod{POD_UID}/{CTR}\n",
                 JobInfo(container_id=CTR, pod_uid=POD_UID),
                 "pod:6b7f9d3e", id="k8s-cgroupfs-v1"),
    pytest.param("0::/user.slice/user-1000.slice/user@1000.service/user.slice/"
                 f"libpod-{CTR}.scope/container\n",
                 JobInfo(container_id=CTR, container_runtime="podman"),
                 f"podman:{CTR[:12]}", id="podman-rootless"),
    pytest.param("0::/lxc.payload.build-box\n",
                 JobInfo(container_id="build-box", container_runtime="lxc"),
                 "lxc:build-box", id="lxc"),
    pytest.param(SLURM_STEP_CGROUP_V1, JobInfo(slurm_job_id="4242"),
                 "slurm:4242", id="slurm-step-cgroup-v1"),
    pytest.param("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n",
                 JobInfo(slurm_job_id="4242"), "slurm:4242", id="slurm-step-cgroup-v2"),
    pytest.param("4:freezer:/slurm_node07/uid_1000/job_77/step_batch\n",
                 JobInfo(slurm_job_id="77"), "slurm:77", id="slurm-multiple-slurmd"),
    pytest.param("0::/system.slice/ollama.service\n",
                 JobInfo(systemd_unit="ollama.service"), "", id="systemd-service"),
]


@pytest.mark.parametrize(("cgroup", "job", "label"), JOB_CASES)
def test_gpu_process_is_placed_in_its_container_pod_or_job(
        tmp_path: Path, cgroup: str, job: JobInfo, label: str) -> None:
    source = HostSource(proc_root=proc_root_with(tmp_path, ME, cgroup))

    p = enrich_one(source, ME)

    assert p.job == job
    assert p.job.label() == label


def test_a_process_in_no_container_has_no_job(tmp_path: Path) -> None:
    root = proc_root_with(tmp_path, ME, "0::/user.slice/user-1000.slice/session-3.scope\n")

    assert enrich_one(HostSource(proc_root=root), ME).job is None


def test_pod_name_comes_from_the_downward_api_env_not_from_hostname(tmp_path: Path) -> None:
    cgroup = ("0::/kubepods.slice/kubepods-besteffort.slice/"
              f"kubepods-besteffort-pod{POD_SLICE_UID}.slice/cri-containerd-{CTR}.scope\n")
    env = {"HOSTNAME": "not-the-pod", "POD_NAME": "trainer-0", "POD_NAMESPACE": "ml",
           "PATH": "/usr/bin"}
    source = HostSource(proc_root=proc_root_with(tmp_path, ME, cgroup, env))

    job = enrich_one(source, ME).job

    assert job == JobInfo(container_id=CTR, container_runtime="containerd", pod_uid=POD_UID,
                          pod_name="trainer-0", pod_namespace="ml")
    assert job.label() == "pod:ml/trainer-0"


def test_slurm_job_id_from_the_environment_when_the_cgroup_does_not_say(tmp_path: Path) -> None:
    root = proc_root_with(tmp_path, ME, "0::/user.slice/user-1000.slice/session-3.scope\n",
                          {"SLURM_JOB_ID": "918273", "SLURM_STEP_ID": "0"})

    job = enrich_one(HostSource(proc_root=root), ME).job

    assert job == JobInfo(slurm_job_id="918273")
    assert job.label() == "slurm:918273"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 file anyway")
def test_an_environ_we_may_not_read_just_means_less_information(tmp_path: Path) -> None:
    root = proc_root_with(tmp_path, ME, f"0::/system.slice/docker-{CTR}.scope\n",
                          {"SLURM_JOB_ID": "1"})
    (tmp_path / str(ME) / "environ").chmod(0)

    p = enrich_one(HostSource(proc_root=root), ME)

    assert p.job == JobInfo(container_id=CTR, container_runtime="docker")
    assert p.user == psutil.Process().username()


# ----------------------------------------------------------------------------------------------
# PIDs NVML reports that we cannot see, and processes we may only partly read


def test_a_pid_from_another_namespace_is_kept_and_marked_hidden_on_each_gpu() -> None:
    hidden = [gpu_process(HOST_ONLY_PID, device=0, gpu_mem=5 << 30),
              gpu_process(HOST_ONLY_PID, device=1, gpu_mem=7 << 30)]

    out = HostSource().enrich(hidden, time.time())

    assert [(p.pid, p.device_index, p.gpu_mem) for p in out] == [
        (HOST_ONLY_PID, 0, 5 << 30), (HOST_ONLY_PID, 1, 7 << 30)]
    for p in out:
        for field in ("user", "name", "cmdline", "cpu_percent", "rss", "create_time"):
            assert getattr(p, field) == Missing("not_visible"), field
        assert p.job is None
        assert p.children == ()


def psutil_with(process_class: type) -> types.SimpleNamespace:
    """psutil, with Process replaced: how a test makes one call fail or counts calls."""
    names = {k: getattr(psutil, k) for k in dir(psutil) if not k.startswith("__")}
    return types.SimpleNamespace(**{**names, "Process": process_class})


def test_a_field_we_may_not_read_is_marked_no_permission_and_the_rest_is_kept() -> None:
    class CmdlineDenied(psutil.Process):
        def cmdline(self) -> list[str]:
            raise psutil.AccessDenied(self.pid)

    p = enrich_one(HostSource(psutil_module=psutil_with(CmdlineDenied)), ME)

    assert p.cmdline == Missing("no_permission")
    assert p.name == psutil.Process().name()
    assert p.create_time == psutil.Process().create_time()
    assert p.rss > 0
    assert isinstance(p.cpu_percent, float)


def test_another_users_process_behind_a_hardened_proc_is_kept_with_no_permission(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # /proc mounted hidepid=1 shows another user's process, but none of its files: its stat
    # (read here as root, who may read anything, so the refusal is played) ...
    real_row = host.read_proc_row

    def row(proc_root: str, pid: int) -> host.ProcRow | None:
        return host.ProcRow(ppid=-1, start=-1, zombie=False) if pid == ME else \
            real_row(proc_root, pid)

    monkeypatch.setattr(host, "read_proc_row", row)

    class AllDenied(psutil.Process):  # ... and what psutil reads
        @contextlib.contextmanager
        def oneshot(self) -> Iterator[None]:
            yield

        def _denied(self, *args: object, **kwargs: object) -> None:
            raise psutil.AccessDenied(self.pid)

        username = name = cmdline = create_time = cpu_percent = cpu_times = _denied
        memory_info = _denied

    p = enrich_one(HostSource(psutil_module=psutil_with(AllDenied)), ME)

    for field in ("user", "name", "cmdline", "cpu_percent", "rss", "create_time"):
        assert getattr(p, field) == Missing("no_permission"), field


def test_a_process_on_two_gpus_is_read_once_and_its_cmdline_once_per_life() -> None:
    calls: collections.Counter[str] = collections.Counter()

    class Counting(psutil.Process):
        def cmdline(self) -> list[str]:
            calls["cmdline"] += 1
            return super().cmdline()

        def cpu_percent(self, interval: float | None = None) -> float:
            calls["cpu_percent"] += 1
            return super().cpu_percent(interval)

    source = HostSource(psutil_module=psutil_with(Counting))
    on_two = [gpu_process(ME, device=0), gpu_process(ME, device=1)]

    first = source.enrich(on_two, time.time())
    second = source.enrich(on_two, time.time())

    # CPU and memory come from the /proc/PID/stat each tick reads anyway, not from psutil.
    assert calls == {"cmdline": 1}
    assert second[0].cpu_percent == second[1].cpu_percent >= 0.0
    assert first[0].rss == first[1].rss > 0
    assert first[0].cmdline == first[1].cmdline == second[0].cmdline
    assert [p.device_index for p in second] == [0, 1]


def test_a_zombie_gpu_process_is_kept_with_what_can_still_be_read() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        wait_for(lambda: psutil.Process(dead.pid).status() == psutil.STATUS_ZOMBIE)

        p = enrich_one(HostSource(), dead.pid)

        assert p.pid == dead.pid
        assert p.user == psutil.Process().username()
        assert p.cmdline == Missing("error", detail="zombie process")
        assert p.rss == 0
    finally:
        dead.wait()


# ----------------------------------------------------------------------------------------------
# DataLoader workers: the children of a GPU process


BUSY_CHILD = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass\n"
PARENT = (
    "import subprocess, sys, time\n"
    f"busy = {BUSY_CHILD!r}\n"
    "kids = [subprocess.Popen([sys.executable, '-c', busy]) for _ in range(2)]\n"
    "print(*(k.pid for k in kids), flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.fixture(scope="module")
def trainer() -> Iterator[tuple[psutil.Process, list[int]]]:
    """A 'training process' with two busy DataLoader-like workers. The workers exit by themselves
    when the parent dies, so a crashed test leaves nothing spinning."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        yield psutil.Process(parent.pid), workers
    finally:
        parent.kill()
        parent.wait()
        procs = [psutil.Process(pid) for pid in workers if psutil.pid_exists(pid)]
        for proc in procs:
            proc.kill()
        psutil.wait_procs(procs, timeout=5)


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    return {pid: sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids}


def test_busy_dataloader_workers_show_under_their_gpu_process(
        trainer: tuple[psutil.Process, list[int]]) -> None:
    parent, workers = trainer
    source = HostSource()

    source.enrich([gpu_process(parent.pid)], time.time())
    before, t0 = cpu_seconds(workers), time.monotonic()
    time.sleep(1.0)
    (p,) = source.enrich([gpu_process(parent.pid)], time.time())
    after, t1 = cpu_seconds(workers), time.monotonic()

    assert p.cmdline == (sys.executable, "-c", PARENT)
    assert sorted(c.pid for c in p.children) == sorted(workers)
    for child in p.children:
        # What the worker really got between the ticks: ~100 % of a core on an idle machine,
        # less when other work shares the cores, so the check is against that, not against 100.
        got = 100 * (after[child.pid] - before[child.pid]) / (t1 - t0)
        assert child.cpu_percent == pytest.approx(got, abs=10), child
        assert child.cpu_percent > 25, child
        assert child.rss > 0
        assert child.name.startswith("python")
    assert p.cpu_percent < 25  # the parent only sleeps


def test_a_child_with_its_own_gpu_context_is_not_counted_as_a_worker(
        trainer: tuple[psutil.Process, list[int]]) -> None:
    parent, (on_gpu, worker) = trainer

    out = HostSource().enrich([gpu_process(parent.pid), gpu_process(on_gpu, device=1)],
                              time.time())

    assert [c.pid for c in out[0].children] == [worker]
    assert out[1].children == ()


def test_untrusted_command_lines_are_stored_exactly_as_the_process_gave_them() -> None:
    code = "import time; print(flush=True); time.sleep(30)"  # the line: it runs, exec is done
    argv = [sys.executable, "-c", code,
            "[red]x[/red]", "\x1b]0;pwn\x07", "\x1b[2J\x1b[31mgotcha", "[bold]"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        p = enrich_one(HostSource(), proc.pid)

        assert p.cmdline == (sys.executable, "-c", code,
                             "[red]x[/red]", "\x1b]0;pwn\x07", "\x1b[2J\x1b[31mgotcha", "[bold]")
    finally:
        proc.kill()
        proc.wait()


# ----------------------------------------------------------------------------------------------
# The node: CPU, memory, pressure


def test_pressure_stall_some_avg10_is_read_for_cpu_io_and_memory(tmp_path: Path) -> None:
    pressure = tmp_path / "pressure"
    pressure.mkdir()
    (pressure / "cpu").write_text("some avg10=12.34 avg60=5.00 avg300=1.00 total=123456789\n"
                                  "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    (pressure / "io").write_text("some avg10=41.50 avg60=20.00 avg300=7.25 total=99\n"
                                 "full avg10=30.00 avg60=15.00 avg300=5.00 total=77\n")
    (pressure / "memory").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
                                     "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")

    h = HostSource(proc_root=str(tmp_path)).sample(time.time())

    assert (h.psi_cpu_some, h.psi_io_some, h.psi_mem_some) == (12.34, 41.5, 0.0)


def test_pressure_is_unsupported_on_a_kernel_without_psi(tmp_path: Path) -> None:
    h = HostSource(proc_root=str(tmp_path)).sample(time.time())

    assert (h.psi_cpu_some, h.psi_io_some, h.psi_mem_some) == (UNSUPPORTED,) * 3


def test_the_first_sample_primes_cpu_and_the_next_one_measures_it() -> None:
    source = HostSource()

    first = source.sample(time.time())
    time.sleep(0.2)
    second = source.sample(time.time())

    assert first.cpu_percent == Missing("pending")
    assert first.cpu_percent_per_core == ()
    assert 0.0 <= second.cpu_percent <= 100.0
    assert len(second.cpu_percent_per_core) == second.cpu_count == psutil.cpu_count()
    assert 0 < second.mem_available <= second.mem_total
    assert 0 < second.mem_used <= second.mem_total
    assert len(second.load_avg) == 3


def test_busy_and_iowait_are_shares_of_the_time_between_two_samples(tmp_path: Path) -> None:
    # Two cores over one interval: core 0 ran 60 user + 20 system of 100 (guest time is already
    # inside user, so it must not count twice); core 1 idled 50 and waited on I/O 50.
    stat = tmp_path / "stat"
    head = "cpu  1 2 3 4 5 6 7 8 9 10\n"  # the sum line: not a core
    tail = "intr 12345 0 0\nctxt 99\nbtime 1700000000\n"
    stat.write_text(head + "cpu0 100 0 100 100 0 0 0 0 10 0\ncpu1 0 0 0 100 100 0 0 0 0 0\n"
                    + tail)
    source = HostSource(proc_root=str(tmp_path))
    source.sample(time.time())
    stat.write_text(head + "cpu0 160 0 120 120 0 0 0 0 40 0\ncpu1 0 0 0 150 150 0 0 0 0 0\n"
                    + tail)
    h = source.sample(time.time())

    assert h.cpu_percent_per_core == (80.0, 0.0)
    assert h.cpu_percent == 40.0
    assert h.iowait_percent == 25.0


def test_the_node_figures_are_those_psutil_gives() -> None:
    source = HostSource()
    source.sample(time.time())
    h = source.sample(time.time())
    vm, swap = psutil.virtual_memory(), psutil.swap_memory()

    assert h.mem_total == vm.total
    assert h.mem_available == pytest.approx(vm.available, abs=64 << 20)
    assert h.mem_used == pytest.approx(vm.total - vm.available, abs=64 << 20)
    assert h.swap_used == pytest.approx(swap.used, abs=64 << 20)
    assert h.cpu_count == psutil.cpu_count()


def test_memory_is_read_from_meminfo_as_free_counts_it(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text(
        "MemTotal:       16000000 kB\nMemFree:         1000000 kB\n"
        "MemAvailable:   12000000 kB\nBuffers:          200000 kB\n"
        "Cached:          9000000 kB\nSwapTotal:       2000000 kB\n"
        "SwapFree:        1500000 kB\n")

    h = HostSource(proc_root=str(tmp_path)).sample(time.time())

    assert (h.mem_total, h.mem_available, h.mem_used, h.swap_used) == (
        16000000 << 10, 12000000 << 10, 4000000 << 10, 500000 << 10)


def test_an_earlier_reading_is_the_first_sample_of_the_node(tmp_path: Path) -> None:
    # As above, the first of the two readings taken as gputop started (sources.cpu_start).
    stat = tmp_path / "stat"
    head = "cpu  1 2 3 4 5 6 7 8 9 10\n"
    stat.write_text(head + "cpu0 100 0 100 100 0 0 0 0 10 0\ncpu1 0 0 0 100 100 0 0 0 0 0\n")
    early = read_cpu_start(str(tmp_path))
    stat.write_text(head + "cpu0 160 0 120 120 0 0 0 0 40 0\ncpu1 0 0 0 150 150 0 0 0 0 0\n")

    source = HostSource(proc_root=str(tmp_path))
    source.start_from(early)
    h = source.sample(time.time())

    assert h.cpu_percent_per_core == (80.0, 0.0)
    assert h.cpu_percent == 40.0
    assert h.iowait_percent == 25.0


def test_gputops_own_start_is_not_the_nodes_load(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Between the early reading and the first sample the node was busy 120 of 400 ticks; 50 of
    # them were gputop's own start (imports, opening the GPUs).
    stat = tmp_path / "stat"
    stat.write_text("cpu0 100 0 100 100 0 0 0 0 0 0\ncpu1 0 0 0 100 0 0 0 0 0 0\n")
    early = read_cpu_start(str(tmp_path))
    early.processes[os.getpid()] = (1, 1000)
    stat.write_text("cpu0 160 0 120 220 0 0 0 0 0 0\ncpu1 40 0 0 260 0 0 0 0 0 0\n")
    monkeypatch.setattr(host, "_own_cpu_ticks", lambda: 1050)

    source = HostSource(proc_root=str(tmp_path))
    source.start_from(early)
    first = source.sample(time.time())
    stat.write_text("cpu0 260 0 120 320 0 0 0 0 0 0\ncpu1 40 0 0 460 0 0 0 0 0 0\n")
    second = source.sample(time.time())

    assert first.cpu_percent == 100.0 * (120 - 50) / 400
    assert first.cpu_percent_per_core == (40.0, 20.0)  # a core's share keeps it
    assert second.cpu_percent == 25.0  # from then on, as any tick: gputop's own time counts


def reading(processes: dict[int, tuple[int, int]]) -> CpuStart:
    """A reading of sources.cpu_start taken now, of these processes."""
    return CpuStart(time=time.time(), stat=b"", processes=processes)


BURN_THEN_IDLE = ("import time\nwhile time.process_time() < 0.4: pass\n"
                  "print('idle', flush=True)\ntime.sleep(60)\n")


@pytest.fixture()
def idle_after_work() -> Iterator[int]:
    """A process that used 0.4 s of CPU and now sleeps: its lifetime average is far from 0 %,
    its share of the last moments is 0 %."""
    proc = subprocess.Popen([sys.executable, "-c", BURN_THEN_IDLE], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "idle\n"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_an_earlier_reading_gives_a_process_its_cpu_share_since_then(
        idle_after_work: int) -> None:
    earlier = read_cpu_start()
    time.sleep(0.3)
    source = HostSource()
    source.start_from(earlier)
    (since_reading,) = source.enrich([gpu_process(idle_after_work)], time.time())
    (first_sight,) = HostSource().enrich([gpu_process(idle_after_work)], time.time())

    assert since_reading.cpu_percent < 5  # it slept all along
    assert first_sight.cpu_percent > 5  # without the reading: its lifetime average


def test_an_earlier_reading_of_another_process_under_the_same_pid_is_not_taken(
        idle_after_work: int) -> None:
    start, used = read_cpu_start().processes[idle_after_work]
    reused = reading(processes={idle_after_work: (start + 1, used)})
    time.sleep(0.1)
    source = HostSource()
    source.start_from(reused)
    (p,) = source.enrich([gpu_process(idle_after_work)], time.time())

    assert p.cpu_percent > 5  # its lifetime average, not the 0 % since the other's reading


def wait_for(condition, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def _fake_stat(root: Path, pid: int, ppid: int, start: int) -> None:
    d = root / str(pid)
    d.mkdir(exist_ok=True)
    tail = " ".join(["0"] * 17)  # the fields between ppid and starttime
    (d / "stat").write_text(f"{pid} (python (x)) S {ppid} {tail} {start} 0 0\n")


def test_new_workers_are_found_by_the_next_full_scan_and_gone_ones_at_once(
        tmp_path: Path) -> None:
    from gputop.sources.host import SCAN_EVERY_S

    _fake_stat(tmp_path, 10, 1, 500)  # the GPU process
    _fake_stat(tmp_path, 11, 10, 600)  # a worker
    _fake_stat(tmp_path, 99, 1, 100)  # something else on the node
    source = HostSource(proc_root=str(tmp_path))
    assert set(source._process_table(frozenset({10}), 0.0)[0]) == {10, 11, 99}

    _fake_stat(tmp_path, 12, 10, 700)  # a worker started after the scan
    (tmp_path / "11" / "stat").unlink()  # a worker that exited
    (tmp_path / "11").rmdir()
    between, tree = source._process_table(frozenset({10}), 1.0)
    assert 11 not in between and 12 not in between  # only the known rows are read again
    assert tree.get(10, []) == []

    later, tree = source._process_table(frozenset({10}), SCAN_EVERY_S)
    assert {10, 12} <= set(later) and 11 not in later and tree[10] == [12]

    _fake_stat(tmp_path, 13, 1, 800)  # a new GPU process: scanned at once
    assert 13 in source._process_table(frozenset({10, 13}), SCAN_EVERY_S + 1)[0]

    _fake_stat(tmp_path, 12, 10, 900)  # PID 12 reused by a new process: scanned at once
    assert source._process_table(frozenset({10, 13}), SCAN_EVERY_S + 2)[0][12].start == 900


def test_a_process_memory_is_what_psutil_reads_of_it(
        trainer: tuple[psutil.Process, list[int]]) -> None:
    parent, workers = trainer
    pids = [parent.pid, *workers]

    def psutil_rss() -> dict[int, int]:
        return {pid: psutil.Process(pid).memory_info().rss for pid in pids}

    before = psutil_rss()
    (p,) = HostSource().enrich([gpu_process(parent.pid)], time.time())
    after = psutil_rss()

    # A process that just started may still grow between the reads.
    ours = {p.pid: p.rss, **{c.pid: c.rss for c in p.children}}
    assert sorted(ours) == sorted(pids)
    for pid, rss in ours.items():
        assert min(before[pid], after[pid]) <= rss <= max(before[pid], after[pid]), pid


def test_between_full_scans_only_new_processes_and_the_followed_ones_are_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gputop.sources.host import FULL_SCAN_EVERY_S, SCAN_EVERY_S

    _fake_stat(tmp_path, 10, 1, 500)  # the GPU process
    _fake_stat(tmp_path, 11, 10, 600)  # its worker
    for pid in range(100, 140):  # the rest of the node
        _fake_stat(tmp_path, pid, 1, 100)
    source = HostSource(proc_root=str(tmp_path))
    source._process_table(frozenset({10}), 0.0)  # the first scan reads every process
    read: list[int] = []
    real_row = host.read_proc_row

    def counting(proc_root: str, pid: int) -> host.ProcRow | None:
        read.append(pid)
        return real_row(proc_root, pid)

    monkeypatch.setattr(host, "read_proc_row", counting)
    _fake_stat(tmp_path, 12, 10, 700)  # a worker started since

    table, tree = source._process_table(frozenset({10}), SCAN_EVERY_S)

    assert sorted(read) == [10, 11, 12]
    assert sorted(tree[10]) == [11, 12] and len(table) == 43
    read.clear()
    source._process_table(frozenset({10}), FULL_SCAN_EVERY_S)  # a full scan again
    assert len(read) == 43


def _fds(files: host._ProcFiles) -> dict[str, int]:
    return dict(files._fds)


def test_a_process_read_every_tick_is_read_through_files_kept_open_until_a_tick_skips_it() -> None:
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        files = host._ProcFiles("/proc")
        files.begin()
        first = files.row(child.pid)
        kept = _fds(files)
        assert first is not None and set(kept) == {f"{child.pid}/stat"}
        files.end()
        deadline = time.monotonic() + 5
        while True:  # the same open file answers what the process does now
            files.begin()
            row = files.row(child.pid)
            files.end()
            assert row is not None and _fds(files) == kept
            if row.cpu > first.cpu or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert row.cpu > first.cpu and row.start == first.start
        assert int(files.read(child.pid, "statm").split()[1]) > 0
        files.begin()
        files.end()  # a tick that did not read it
        assert _fds(files) == {}
    finally:
        child.kill()
        child.wait()


def test_a_kept_file_of_a_process_that_has_exited_reads_as_gone_and_is_closed() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    files = host._ProcFiles("/proc")
    files.begin()
    assert files.row(child.pid) is not None
    fd = files._fds[f"{child.pid}/stat"]
    child.kill()
    child.wait()  # reaped: a new process may take the PID, never this file
    assert files.row(child.pid) is None
    assert files._fds == {}
    with pytest.raises(OSError):
        os.fstat(fd)  # closed
    files.close()


def test_closing_the_host_source_closes_the_files_it_keeps() -> None:
    src = HostSource()
    me = gpu_process(os.getpid())
    now = time.time()
    src.enrich([me], now)  # a scan of /proc: nothing kept
    src.enrich([me], now + 1)  # the GPU process read again
    assert {f"{os.getpid()}/stat", f"{os.getpid()}/statm"} <= set(src._files._fds)
    src.close()
    assert src._files._fds == {}


def test_a_process_whose_host_figures_held_still_is_handed_again() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        deadline, cpu = time.monotonic() + 10, -1
        while time.monotonic() < deadline:  # past its start-up: asleep from here on
            row = host.read_proc_row("/proc", child.pid)
            assert row is not None
            if row.cpu == cpu:
                break
            cpu = row.cpu
            time.sleep(0.3)
        src = HostSource()
        p = gpu_process(child.pid)
        now = time.time()
        src.enrich([p], now)  # first sight
        time.sleep(0.05)
        a = src.enrich([p], now + 1)[0]
        time.sleep(0.05)
        b = src.enrich([p], now + 2)[0]
        moved = dataclasses.replace(p, gpu_mem=p.gpu_mem + 1)  # the GPU side changed
        c = src.enrich([moved], now + 3)[0]
        src.close()
    finally:
        child.kill()
        child.wait()
    assert a.cpu_percent == b.cpu_percent == 0.0 and a.rss == b.rss  # asleep
    assert b is a  # nothing in it changed: the very object again
    assert c is not b and c.gpu_mem == moved.gpu_mem and c.cpu_percent is b.cpu_percent
