"""ExecuTorch's thread pool and the app's programs: no program outlives the pool it was loaded on.

ExecuTorch has one thread pool per process, and every XNNPACK delegate keeps the raw pthreadpool it
was loaded with. The app's "Try it" tab loads every task with the default thread count and its
"Benchmark" asks for another; resizing the pool (which frees the old one) while "Try it"'s
programs are loaded would leave them running on freed memory. The JNI therefore resizes only
while no program is loaded and refuses another size while programs are open; the app closes its
programs before benchmarking (BundleSession.kt).

host/java/io/palkit/host/ThreadPoolProbe.java plays the two tabs through the app's own JNI path
(the core opens the bundle, ExecuTorchTasks loads the programs): load at one count, ask for
another while loaded, run the first programs again, then close, benchmark and reload. Under
AddressSanitizer the JNI code before this fix fails here with a heap-use-after-free inside
pthreadpool (the exact command and report: android_demo/README.md, "Thread pool");
PALKIT_THREADPOOL_JNI_SOURCE names another JNI source for the AddressSanitizer test, to show that.
Each test runs on this host's architecture and on aarch64 under qemu (the AddressSanitizer run
too: the cross compiler's libasan goes into the aarch64 JVM through qemu's environment).
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from palkit.android_demo.host import native_host
from testing_utils import HANG_GUARD_S

TEXT = "the movie was good"
PROBE = "io.palkit.host.ThreadPoolProbe"


def probe(build, bundle: Path, try_threads: int, bench_threads: int,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """ThreadPoolProbe in a child JVM, so a native crash fails the test instead of pytest."""
    return subprocess.run(
        build.java_command(PROBE, str(bundle), str(try_threads), str(bench_threads), TEXT),
        capture_output=True, text=True, timeout=HANG_GUARD_S, env={**os.environ, **(env or {})})


def assert_pool_outlives_programs(done: subprocess.CompletedProcess, try_threads: int,
                                  bench_threads: int) -> None:
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout}{done.stderr[-6000:]}"
    assert done.stdout.splitlines() == [
        "try-it loaded: sst",
        f"bench while loaded: refused: cannot run ExecuTorch on {bench_threads} threads while 1 "
        f"program(s) loaded on {try_threads} threads are open: close them first",
        "try-it again: same",        # still on the pool it was loaded with
        "bench after close: same",   # the benchmark's count applies once nothing holds the pool
        "try-it reloaded: same",
    ]
    # The resizes reached ExecuTorch's real pool, each while no program was loaded.
    resets = [line.rsplit("] ", 1)[1] for line in done.stderr.splitlines()
              if "Resetting threadpool" in line]
    assert resets == [f"Resetting threadpool to {n} threads." for n in
                      (try_threads, bench_threads, try_threads)]


@pytest.mark.parametrize("try_threads, bench_threads", [(2, 1), (1, 2)])
def test_another_thread_count_waits_until_the_loaded_programs_are_closed(
        native_build, et_fp32, try_threads, bench_threads):
    done = probe(native_build, et_fp32, try_threads, bench_threads)
    assert_pool_outlives_programs(done, try_threads, bench_threads)


def _libasan(arch: str) -> Path | None:
    compiler = native_host.compiler(arch)
    found = subprocess.run([compiler, "-print-file-name=libasan.so"], capture_output=True,
                           text=True).stdout.strip()
    return Path(found) if found and Path(found).is_file() else None


@pytest.mark.slow
def test_no_program_runs_on_a_freed_pool_under_address_sanitizer(native_build, et_fp32,
                                                                  tmp_path):
    """Loaded on 2 threads, asked for 1, run again: the sequence that, before the fix, ran the
    first program's XNNPACK delegate on the freed 2-thread pool (ASan: heap-use-after-free in
    pthreadpool_parallelize_*, freed by ThreadPool::_unsafe_reset_threadpool)."""
    libasan = _libasan(native_build.arch)
    if libasan is None:
        pytest.skip("the C++ compiler has no libasan.so (AddressSanitizer runtime)")
    source = Path(os.environ.get("PALKIT_THREADPOOL_JNI_SOURCE", native_host.JNI_SOURCE))
    command = native_host.compile_command(tmp_path / "libpalkit_executorch.so",
                                            native_build.arch)
    command[command.index(str(native_host.JNI_SOURCE))] = str(source)
    command[1:1] = ["-fsanitize=address", "-fno-omit-frame-pointer", "-g"]
    built = subprocess.run(command, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert built.returncode == 0, built.stderr[-3000:]
    # The JVM is not built with ASan: its runtime goes first, and the JVM keeps its own signals.
    done = probe(replace(native_build, library_dir=tmp_path), et_fp32, 2, 1,
                 env={"LD_PRELOAD": str(libasan),
                      "ASAN_OPTIONS": "detect_leaks=0:handle_segv=0:allow_user_segv_handler=1"})
    assert "AddressSanitizer" not in done.stderr, done.stderr[-6000:]
    assert_pool_outlives_programs(done, 2, 1)
