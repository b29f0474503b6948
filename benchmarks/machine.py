"""Facts about the machine a benchmark ran on, its measured SGEMM limit, and the load other processes put
on it while the benchmark ran (a busy machine makes every figure noisier and ratios less trustworthy)."""

import os
import platform
import time
from dataclasses import dataclass

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


def machine_facts(threads: int) -> dict:
    import onnxruntime
    import torch

    cpu = _cpuinfo()
    flags = set(cpu.get("flags", "").split())
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
