"""Facts about the machine a benchmark ran on, its measured SGEMM and memory-bandwidth limits, and the load
other processes put on it while the benchmark ran (a busy machine makes every figure noisier and ratios less
trustworthy)."""

import os
import platform
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
)


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return info


def _meminfo_gib() -> float | None:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def machine_facts(threads: int, *, bandwidth: bool = True) -> dict:
    """What the machine is, and (`bandwidth`, a few seconds) its memory bandwidth at `threads` threads."""
    import onnxruntime
    import torch

    cpu = _cpuinfo()
    flags = set(cpu.get("flags", "").split())
    llc = llc_bytes()
    return {
        "cpu": cpu.get("model name", platform.processor() or platform.machine()),
        "cpu_family_model": f"{cpu.get('cpu family', '?')}/{cpu.get('model', '?')}",
        "logical_cpus": os.cpu_count(),
        "cpu_flags": [flag for flag in FLAGS if flag in flags],
        "hypervisor": "hypervisor" in flags,
        "memory_gib": _meminfo_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "threads": threads,
        "gpu": "none used: CPU only (CUDA IO binding and fp16 are out of scope on this machine)",
        "last_level_cache_mb": None if llc is None else round(llc / 2**20, 1),
        **({"memory_bandwidth": memory_bandwidth(threads)} if bandwidth else {}),
    }


def llc_bytes() -> int | None:
    """The size of CPU 0's last-level cache (the highest level in /sys, else /proc/cpuinfo's `cache size`).
    Under a hypervisor it is the host's cache, shared with every other guest on that socket."""
    sizes: dict[int, int] = {}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        if text and text[-1] in units and text[:-1].isdigit():
            sizes[level] = max(sizes.get(level, 0), int(text[:-1]) * units[text[-1]])
    if sizes:
        return sizes[max(sizes)]
    size = _cpuinfo().get("cache size", "").split()  # e.g. "491520 KB"
    return int(size[0]) * 2**10 if len(size) == 2 and size[0].isdigit() and size[1] == "KB" else None


def memory_bandwidth(threads: int, *, array_bytes: int | None = None, repeats: int = 5) -> dict:
    """Best-of-`repeats` memory bandwidth in GB/s (1e9 bytes per second) of three STREAM-style kernels over
    float64 arrays a, b, c of `array_bytes` each (default: 256 MiB, or half the last-level cache when that
    is larger, so that copy moves at least the cache's size and triad and read 1.5 times it):

        copy   a = b         read N + write N
        triad  a = b + s*c   read 2N + write N
        read   sum(a, b, c)  read 3N (a decode step mostly reads: this one is its ceiling)

    Bytes are those the kernel names, as STREAM counts them: the write-allocate read of a line that a store
    misses (x86 does it unless the store is non-temporal) is not counted, so copy and triad understate the
    bus traffic by up to N. Each kernel runs on `threads` Python threads, each on its own contiguous slice
    of the arrays: numpy (copyto, sum) and torch (add) release the GIL inside the kernel, so the slices run
    in parallel. The triad is torch.add(b, c, alpha=s, out=a), at one torch thread per slice, because numpy
    has no one-pass form (b + s*c makes a temporary and would read and write it too)."""
    import torch

    if array_bytes is None:
        array_bytes = max(256 * 2**20, (llc_bytes() or 0) // 2)
    n = max(array_bytes // 8, threads)
    started = time.perf_counter()
    buffer = np.empty(3 * n)  # one allocation: the read kernel sums all three arrays at once
    buffer.fill(1.0)  # touches every page before timing
    a, b, c = buffer[:n], buffer[n : 2 * n], buffer[2 * n :]
    ta, tb, tc = (torch.from_numpy(x) for x in (a, b, c))
    bounds = [(i * n // threads, (i + 1) * n // threads) for i in range(threads)]
    whole = [(i * 3 * n // threads, (i + 1) * 3 * n // threads) for i in range(threads)]
    kernels: dict[str, tuple[Callable[[int, int], object], list[tuple[int, int]], int]] = {
        "copy": (lambda i, j: np.copyto(a[i:j], b[i:j]), bounds, 2 * n * 8),
        "triad": (lambda i, j: torch.add(tb[i:j], tc[i:j], alpha=3.0, out=ta[i:j]), bounds, 3 * n * 8),
        "read": (lambda i, j: buffer[i:j].sum(), whole, 3 * n * 8),
    }
    torch_threads = torch.get_num_threads()
    results: dict = {}
    try:  # torch's intra-op thread count is per calling thread under OpenMP: each slice's thread sets 1
        with ThreadPoolExecutor(threads, initializer=torch.set_num_threads, initargs=(1,)) as pool:
            for name, (kernel, slices, moved) in kernels.items():
                best = float("inf")
                for repeat in range(repeats + 1):  # the first is a warm-up
                    start = time.perf_counter()
                    list(pool.map(kernel, *zip(*slices, strict=True)))
                    if repeat:
                        best = min(best, time.perf_counter() - start)
                results[f"{name}_gbs"] = round(moved / best / 1e9, 2)
    finally:
        torch.set_num_threads(torch_threads)
    return {
        **results,
        "array_mb": round(n * 8 / 2**20, 1),
        "threads": threads,
        "repeats": repeats,
        "seconds": round(time.perf_counter() - started, 2),
        "counting": "bytes named by the kernel: copy 2N, triad 3N, read 3N; write-allocate not counted",
    }


def sgemm_gflops(threads: int, *, size: int = 2048, repeats: int = 5) -> dict[str, float]:
    """Best-of-`repeats` float32 matmul GFLOP/s: PyTorch at `threads` threads (the limit the workloads are
    compared with), and numpy's BLAS, which uses every core whatever `threads` is (for reference)."""
    import torch

    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    flops = 2.0 * size**3
    results = {}
    for name, product in (("torch", lambda: ta @ tb), ("numpy_all_cores", lambda: a @ b)):
        product()
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            product()
            best = min(best, time.perf_counter() - start)
        results[name] = round(flops / best / 1e9, 1)
    results["limit"] = results["torch"]
    return results


def _busy_jiffies() -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs since boot, from /proc/stat."""
    try:
        with open("/proc/stat") as handle:
            fields = [int(x) for x in handle.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


@dataclass
class LoadMonitor:
    """CPU time spent by processes other than this one while the benchmark ran."""

    start_wall: float = 0.0
    start_own: float = 0.0
    start_jiffies: tuple[int, int] | None = None
    start_loadavg: tuple[float, ...] = ()

    def start(self) -> "LoadMonitor":
        self.start_wall = time.perf_counter()
        times = os.times()
        self.start_own = times.user + times.system + times.children_user + times.children_system
        self.start_jiffies = _busy_jiffies()
        self.start_loadavg = os.getloadavg()
        return self

    def stop(self) -> dict:
        wall = time.perf_counter() - self.start_wall
        times = os.times()
        own = times.user + times.system + times.children_user + times.children_system - self.start_own
        end = _busy_jiffies()
        result: dict = {
            "wall_s": round(wall, 1),
            "loadavg_start": [round(x, 2) for x in self.start_loadavg],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "own_cpu_s": round(own, 1),
        }
        if end is not None and self.start_jiffies is not None:
            tick = os.sysconf("SC_CLK_TCK")
            busy = (end[0] - self.start_jiffies[0]) / tick
            others = max(busy - own, 0.0)
            result["others_cpu_s"] = round(others, 1)
            result["others_busy_cores"] = round(others / max(wall, 1e-9), 2)
            result["other_load_present"] = others / max(wall, 1e-9) > 0.1
        return result
