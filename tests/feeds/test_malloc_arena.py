"""A long-running gputop keeps one glibc heap for all its threads (feeds.one_malloc_arena)."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap

import pytest

# Eight threads alive at once, each allocating through malloc (a bytearray this size does), as
# the dashboard's PCIe throughput samples are; then glibc's own account of its heaps.
THREADS = textwrap.dedent("""
    import ctypes, os, sys, tempfile, threading
    from gputop.feeds import one_malloc_arena
    if sys.argv[1] == "one":
        assert one_malloc_arena()
    go = threading.Event()
    kept = []
    def work():
        kept.append(bytearray(200_000))
        go.wait()
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    while len(kept) < 8:
        pass
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    fd, path = tempfile.mkstemp()
    os.close(fd)
    f = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(f))
    libc.fclose(ctypes.c_void_p(f))
    go.set()
    for t in threads:
        t.join()
    print(open(path).read().count("<heap nr="))
    os.unlink(path)
""")


def _glibc() -> bool:
    return sys.platform.startswith("linux") and hasattr(ctypes.CDLL(None), "gnu_get_libc_version")


def _heaps(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", THREADS, mode], check=True, text=True,
                         capture_output=True).stdout
    return int(out)


@pytest.mark.skipif(not _glibc(), reason="glibc's heaps")
def test_threads_share_one_heap_once_asked() -> None:
    assert _heaps("many") > 1  # glibc's default: a heap for each thread allocating alongside
    assert _heaps("one") == 1


@pytest.mark.skipif(_glibc(), reason="not glibc")
def test_elsewhere_nothing_changes() -> None:
    from gputop.feeds import one_malloc_arena

    assert not one_malloc_arena()
