"""gputop.probe: an opt-in, in-process probe for PyTorch training scripts.

NVML sees only what the driver sees: a process's reserved memory plus its CUDA context. What
decides a data-loader stall, allocator fragmentation or batch-size headroom (allocated vs reserved,
step boundaries, time blocked waiting for the next batch) is known only inside the process. This
module publishes it, once a second, to a small JSON file that `gputop` reads (docs/probe.md):

    import gputop.probe as gp
    gp.start()
    for batch in gp.wrap(loader):
        ...
        gp.step()               # optional: marks the step end, records the step's memory peak

or, for a script you cannot edit: `python -m gputop.probe train.py args...`.

It never imports Textual, and imports torch only in `start()`: without torch (or without CUDA)
it still publishes steps and loader waits, with the memory fields null.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
PUBLISH_INTERVAL_S = 1.0
RECENT_STEPS = 50  # step time, loader wait and wait_frac are over the last this many steps
# recent_wait_frac: the share over the newest steps that make at least 5 steps and at least 5 s,
# so that it follows the loader within seconds of it catching up (or falling behind) and is not
# one slow step's noise in a fast loop.
LATEST_STEPS = 5
LATEST_S = 5.0
PAIRS_KEPT = 50  # (batch size, step peak) pairs for the headroom fit
WARMUP_STEPS = 2  # optimizer states, autotuning and graph pools make the first steps atypical
# memory_stats() costs 80-150 us on an H100, too much for every step of a fast loop; step peaks
# are read at most about twice per PEAK_EVERY_S (see Probe._sample_peak).
PEAK_EVERY_S = 0.5
# Fallback when $XDG_RUNTIME_DIR is unusable. Not $TMPDIR: the reader must find it.
TMP_ROOT = "/tmp"

_STAT_KEYS = {  # payload field -> torch.cuda.memory_stats() key
    "allocated": "allocated_bytes.all.current",
    "reserved": "reserved_bytes.all.current",
    "active": "active_bytes.all.current",
    "inactive_split": "inactive_split_bytes.all.current",
    "num_alloc_retries": "num_alloc_retries",
    "num_ooms": "num_ooms",
}
MEMORY_FIELDS = (*_STAT_KEYS, "peak_allocated", "peak_reserved")

_clock = time.perf_counter


def tmp_dir(uid: int) -> Path:
    return Path(TMP_ROOT) / f"gputop-{uid}"


def publish_dirs() -> list[Path]:
    """Where this process may publish, best first."""
    dirs = []
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(xdg):
        dirs.append(Path(xdg) / "gputop")
    dirs.append(tmp_dir(os.getuid()))
    return dirs


def private_dir(path: Path) -> bool:
    """Creates `path` (mode 0700) or checks that the existing one is ours and not a symlink.
    In /tmp another user could have made it first, to read or replace what we write."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return False
        if st.st_mode & 0o077:
            os.chmod(path, 0o700)  # ours, so tightening it is safe
    except OSError:
        return False
    return True


def batch_size_of(batch: Any) -> int | None:
    """Rows in a batch: the first dimension of its first tensor, looking at most two levels down
    through first elements ((inputs, labels), {"input_ids": ...}), so the cost per batch stays
    constant. `len()` is only the fallback, because len((inputs, labels)) is 2."""
    x = batch
    for _ in range(3):
        shape = getattr(x, "shape", None)
        if shape is not None:
            return int(shape[0]) if len(shape) else None
        if type(x) in (tuple, list):
            if not x:
                break
            x = x[0]
        elif isinstance(x, Mapping):
            x = next(iter(x.values()), None)
        else:
            break
    try:
        return len(batch)
    except TypeError:
        return None


def recent_wait_frac(steps: Sequence[tuple[float, float]], stalled: float = 0.0) -> float | None:
    """The share of step time blocked on the loader over the newest of `steps` ((wall, wait) of
    each, oldest first): as many as cover both LATEST_STEPS steps and LATEST_S seconds, or all of
    them when they are fewer, plus `stalled`, a wait still in progress."""
    wall = wait = 0.0
    for n, (w, x) in enumerate(reversed(steps)):
        if n >= LATEST_STEPS and wall >= LATEST_S:
            break
        wall += w
        wait += x
    wall += stalled
    wait += stalled
    return min(1.0, wait / wall) if wall > 0 else None


class _Timed:
    """An iterator that measures how long each next() blocks. Attribute access falls through to
    the wrapped iterator, so code that pokes at a DataLoader iterator keeps working."""

    __slots__ = ("_it", "_probe")

    def __init__(self, it: Iterator[Any], probe: Probe) -> None:
        self._it = it
        self._probe = probe

    def __iter__(self) -> _Timed:
        return self

    def __next__(self) -> Any:
        return self._probe._fetch(self._it)

    def __len__(self) -> int:
        return len(self._it)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._it, name)


class _Wrapped:
    """`wrap(loader)`: iterable like the loader (len(), .dataset, .sampler stay reachable)."""

    def __init__(self, loader: Iterable[Any], probe: Probe) -> None:
        self._loader = loader
        self._probe = probe

    def __iter__(self) -> Iterator[Any]:
        it = iter(self._loader)
        # DataLoader.__iter__ may already be timed (python -m gputop.probe): don't count twice.
        return it if isinstance(it, _Timed) else _Timed(it, self._probe)

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class Probe:
    """Step and loader bookkeeping (on the training thread) plus a daemon thread that publishes.

    A step runs from one boundary to the next: a `step()` call, or, when the script never calls
    it, the start of the next fetch. Its loader wait is the time the fetch that delivered its
    batch spent blocked in next()."""

    def __init__(self, *, torch_module: Any = None) -> None:
        self._torch = torch_module
        self._cuda: Any = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.interval = PUBLISH_INTERVAL_S
        self.path: Path | None = None
        self._pid = os.getpid()
        self._warned = False
        # training-thread state
        self.steps = 0
        self._open = False  # a batch was handed out and its step has not ended
        self._step_start: float | None = None
        self._pending_wait = 0.0
        self._pending_item: Any = None  # the batch of the open step
        self._blocked_since: float | None = None  # read by the publisher: a stall in progress
        self._recent: deque[tuple[float, float]] = deque(maxlen=RECENT_STEPS)  # (wall, wait)
        self._pairs: deque[tuple[int, int]] = deque(maxlen=PAIRS_KEPT)
        self._device: int | None = None
        self._since_reset = 0
        self._want_single = True
        self._last_peak = float("-inf")
        self._window_peaks = (0, 0)  # (allocated, reserved) read by steps since the last publish

    # ------------------------------------------------------------------------------------------
    # training thread

    def wrap(self, loader: Iterable[Any]) -> _Wrapped:
        return _Wrapped(loader, self)

    def step(self, batch_size: int | None = None) -> None:
        self._close_step(_clock(), batch_size)

    def _fetch(self, it: Iterator[Any]) -> Any:
        """next(it), timed. One method call per batch: this is the loop's hot path."""
        t0 = _clock()
        if self._open:  # the script did not call step(): the step ends when it asks for more
            self._close_step(t0, None)
        self._step_start = self._blocked_since = t0
        try:
            item = next(it)
        finally:
            self._blocked_since = None
        self._pending_wait = _clock() - t0
        self._pending_item = item  # sized only if a memory peak is recorded for this step
        self._open = True
        return item

    def _close_step(self, now: float, batch_size: int | None) -> None:
        start, wait, item = self._step_start, self._pending_wait, self._pending_item
        self._open = False
        self._pending_wait = 0.0
        self._pending_item = None  # hold no batch past its step
        self._step_start = now
        with self._lock:
            self.steps += 1
            if start is not None:
                self._recent.append((now - start, wait))
        if self._cuda is not None:
            self._sample_peak(now, batch_size, item)

    def _sample_peak(self, now: float, batch_size: int | None, item: Any) -> None:
        """Reads and resets the allocator's peak counters, on this (the training) thread: a reset
        from the publisher thread would race with the step. Reads happen when PEAK_EVERY_S has
        passed, and again one step later, so that every other read spans exactly one step and
        gives a clean (batch, peak) pair without paying memory_stats() on every step."""
        cuda = self._cuda
        if not cuda.is_initialized():
            return
        self._since_reset += 1
        single = self._since_reset == 1
        if not (single and self._want_single) and now - self._last_peak < PEAK_EVERY_S:
            return
        if self._device is None:
            self._device = cuda.current_device()  # this thread's device (set_device under DDP)
        # One memory_stats() call gives both peaks; max_memory_allocated() and
        # max_memory_reserved() would each make the same call.
        stats = cuda.memory_stats(self._device)
        cuda.reset_peak_memory_stats(self._device)
        alloc = int(stats.get("allocated_bytes.all.peak", 0))
        reserved = int(stats.get("reserved_bytes.all.peak", 0))
        batch = (batch_size or batch_size_of(item)) if single else None
        with self._lock:
            if batch and self.steps > WARMUP_STEPS:
                self._pairs.append((int(batch), alloc))
            a, r = self._window_peaks
            self._window_peaks = (max(a, alloc), max(r, reserved))
        self._want_single = not single
        self._since_reset = 0
        self._last_peak = now

    # ------------------------------------------------------------------------------------------
    # publishing

    def start(self, interval: float = PUBLISH_INTERVAL_S) -> Path | None:
        """Starts publishing every `interval` seconds; returns the file, or None when no private
        directory could be made. Calling it again does nothing."""
        if self._thread is not None:
            return self.path
        self.interval = interval
        self._attach_torch()
        for d in publish_dirs():
            if private_dir(d):
                self.path = d / f"{os.getpid()}.json"
                break
        else:
            self._warn(f"no private directory to publish in (tried {publish_dirs()})")
            return None
        self._pid = os.getpid()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gputop-probe", daemon=True)
        self._thread.start()
        atexit.register(self.stop)
        return self.path

    def _attach_torch(self) -> None:
        if self._torch is None:
            try:
                import torch
            except ImportError:
                return
            self._torch = torch
        cuda = getattr(self._torch, "cuda", None)
        try:
            if cuda is not None and cuda.is_available():
                self._cuda = cuda
        except Exception:  # a broken driver must not stop the training script
            self._cuda = None

    def stop(self) -> None:
        """Stops publishing and removes the file (only in the process that started it: forked
        DataLoader workers inherit this object)."""
        if self._thread is None or os.getpid() != self._pid:
            return
        self._stop.set()
        self._thread.join(timeout=2 * self.interval)
        self._thread = None
        if self.path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)

    def _run(self) -> None:
        while True:
            try:
                self.publish()
            except Exception as e:  # the probe must never take the training down
                self._warn(f"cannot publish: {type(e).__name__}: {e}")
            if self._stop.wait(self.interval):
                return

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            print(f"gputop.probe: {message}", file=sys.stderr)

    def publish(self) -> Path | None:
        """Writes one payload atomically: a reader sees the old file or the new one, never half."""
        if self.path is None:
            return None
        data = json.dumps(self.snapshot(), separators=(",", ":")).encode()
        import tempfile  # here: a training script imports this module and may never publish

        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{os.getpid()}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:  # mkstemp made it 0600
                f.write(data)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return self.path

    def snapshot(self) -> dict[str, Any]:
        """The payload as it would be published now (docs/probe.md)."""
        memory = self._memory()
        now = _clock()
        with self._lock:
            recent = list(self._recent)
            pairs = [list(p) for p in self._pairs]
            steps = self.steps
            window = self._window_peaks
            self._window_peaks = (0, 0)
        wall = sum(w for w, _ in recent)
        wait = sum(w for _, w in recent)
        step_time = wall / len(recent) if recent else None
        blocked = self._blocked_since
        stalled = now - blocked if blocked is not None else 0.0
        # a stall in progress counts before the batch arrives
        wall += stalled
        wait += stalled
        if memory.get("peak_allocated") is not None:
            memory["peak_allocated"] = max(memory["peak_allocated"], window[0])
            memory["peak_reserved"] = max(memory["peak_reserved"], window[1])
        return {
            "v": SCHEMA_VERSION,
            "ts": time.time(),
            "pid": os.getpid(),
            **memory,
            "allocator_conf": _allocator_conf(),
            "steps": steps,
            "step_time_s": step_time,
            "loader_wait_s": wait,
            "wait_frac": min(1.0, wait / wall) if wall > 0 else None,
            "recent_wait_frac": recent_wait_frac(recent, stalled),
            "batch_sizes": pairs,
            "torch": getattr(self._torch, "__version__", None),
        }

    def _memory(self) -> dict[str, Any]:
        """Allocator counters, read on the publisher thread (memory_stats is thread-safe and
        does not create a CUDA context when there is none)."""
        out: dict[str, Any] = {"device": None, "uuid": None, **dict.fromkeys(MEMORY_FIELDS)}
        cuda = self._cuda
        if cuda is None or not cuda.is_initialized():
            return out
        device = self._device if self._device is not None else _guess_device(cuda)
        stats = cuda.memory_stats(device)
        out["device"] = device
        out["uuid"] = _uuid(cuda, device)
        for field, key in _STAT_KEYS.items():
            out[field] = int(stats.get(key, 0))
        out["peak_allocated"] = int(stats.get("allocated_bytes.all.peak", 0))
        out["peak_reserved"] = int(stats.get("reserved_bytes.all.peak", 0))
        return out


def _allocator_conf() -> str | None:
    """PYTORCH_CUDA_ALLOC_CONF as the reader accepts it: printable ASCII, at most 512 chars."""
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    if conf is None:
        return None
    return "".join(c if " " <= c <= "~" else "?" for c in conf[:512])


def _guess_device(cuda: Any) -> int:
    """Before the training thread has reported its device: torchrun's LOCAL_RANK if it names a
    visible GPU (the usual set_device target), else 0."""
    try:
        rank = int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        rank = 0
    return rank if 0 <= rank < cuda.device_count() else 0


def _uuid(cuda: Any, device: int) -> str | None:
    """NVML's spelling ("GPU-…"), so the monitor can join on it; torch prints the bare UUID."""
    try:
        raw = str(cuda.get_device_properties(device).uuid)
    except Exception:  # older torch has no .uuid
        return None
    return raw if raw.startswith(("GPU-", "MIG-")) else f"GPU-{raw}"


# ----------------------------------------------------------------------------------------------
# module-level API, on one probe per process

_PROBE = Probe()


def start(interval: float = PUBLISH_INTERVAL_S) -> Path | None:
    """Starts the publisher thread; returns the file it writes, or None if it cannot."""
    return _PROBE.start(interval)


def stop() -> None:
    _PROBE.stop()


def wrap(loader: Iterable[Any]) -> _Wrapped:
    """`for batch in wrap(loader)`: times each next(), counts steps and batch sizes."""
    return _PROBE.wrap(loader)


def step(batch_size: int | None = None) -> None:
    """Marks the end of a training step (call it on the training thread)."""
    _PROBE.step(batch_size)


def snapshot() -> dict[str, Any]:
    return _PROBE.snapshot()


def patch_dataloader(probe: Probe = _PROBE) -> bool:
    """Times every torch DataLoader iteration without editing the script."""
    try:
        from torch.utils.data import DataLoader
    except ImportError:
        return False
    original = DataLoader.__iter__
    if getattr(original, "_gputop_timed", False):
        return True

    def timed_iter(self: Any) -> Iterator[Any]:
        return _Timed(original(self), probe)

    timed_iter._gputop_timed = True  # type: ignore[attr-defined]
    DataLoader.__iter__ = timed_iter  # type: ignore[method-assign]
    return True


USAGE = """usage: python -m gputop.probe [--interval S] (script.py | -m module) [args...]

Runs a training script with the gputop probe: publishes allocator memory, steps and DataLoader
waits every second for `gputop` to show (docs/probe.md). GPUTOP_PROBE=0 runs the script
without the probe."""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    interval = PUBLISH_INTERVAL_S
    if args[:1] == ["--interval"] and len(args) > 1:
        try:
            interval = float(args[1])
        except ValueError:
            interval = 0.0
        if not interval > 0:
            print(f"gputop.probe: --interval needs a positive number, not {args[1]!r}",
                  file=sys.stderr)
            return 2
        args = args[2:]
    module = args[:1] == ["-m"]
    if module:
        args = args[1:]
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return 0 if args else 2
    if not module and not os.path.isfile(args[0]):
        print(f"gputop.probe: no such script: {args[0]}", file=sys.stderr)
        return 2
    if os.environ.get("GPUTOP_PROBE", "1") != "0":
        os.environ["GPUTOP_PROBE"] = "1"  # tells the script (and its children) it is probed
        start(interval)
        patch_dataloader()
    import runpy

    target, sys.argv = args[0], args
    if module:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")
    return 0


if __name__ == "__main__":
    # Run through the importable module, not this __main__ copy: a script that also does
    # `import gputop.probe` must reach the same probe, not start a second one.
    from gputop.probe import main as _main

    sys.exit(_main())
