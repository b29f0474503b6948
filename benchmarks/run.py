"""The benchmark run: models, machine limit, workloads side by side, start-up, int8 accuracy, targets.

Every workload's variants run in the same process, alternating (the order reversed every other
repetition), after warm-up, with the same thread count for PyTorch (`torch.set_num_threads`) and ONNX
Runtime (`intra_op_num_threads`). Each figure is a median with its min and max over the repetitions.

Between two timed calls the benchmark sleeps PAUSE_S: both libraries leave their worker threads spinning
for a while after a call (ONNX Runtime's intra-op pool, PyTorch's OpenMP), and with a 20 ms pause
whichever variant ran right after another one was measured up to 2x slower on 2 cores.
"""

import contextlib
import gc
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from benchmarks.machine import LoadMonitor, machine_facts, sgemm_gflops
from benchmarks.models import FAMILIES, prepare_models
from benchmarks.startup import measure_startup
from benchmarks.targets import evaluate_targets
from benchmarks.workloads import BUILDERS, Workload

logger = logging.getLogger(__name__)

SCHEMA = 1
PAUSE_S = 0.25
Progress = Callable[[str], None]


@dataclass(frozen=True)
class BenchOptions:
    work: Path  # where the models are built and kept between runs
    threads: int
    warmup: int = 2
    repeats: int = 7
    quick: bool = False  # fewer repetitions and shorter generations, for trying the harness
    fresh: bool = False  # rebuild the models even if an up-to-date build is in `work`
    accuracy: bool = True  # int8 accuracy cost on the committed tiny exports (exported/)
    families: tuple[str, ...] = FAMILIES
    exported: Path | None = None  # the tiny reference exports (default: exported/ in the checkout)


def time_workload(workload: Workload, *, warmup: int, repeats: int) -> dict[str, dict]:
    """Per variant: median, min and max milliseconds per call, alternating the variants."""
    names = list(workload.variants)
    for name in names:
        for _ in range(warmup):
            workload.variants[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            call = workload.variants[name]
            time.sleep(PAUSE_S)
            start = time.perf_counter()
            for _ in range(workload.inner):
                call()
            samples[name].append((time.perf_counter() - start) / workload.inner * 1e3)
    return {
        name: {
            "median_ms": round(float(np.median(values)), 3),
            "min_ms": round(min(values), 3),
            "max_ms": round(max(values), 3),
            "samples": len(values),
        }
        for name, values in samples.items()
    }


def _summary(workload: Workload, timings: dict[str, dict], sgemm: float) -> dict:
    torch_ms = timings["pytorch"]["median_ms"]
    result = {
        "key": workload.key,
        "title": workload.title,
        "unit": workload.unit,
        "calls_per_sample": workload.inner,
        "variants": timings,
        "speedup_vs_pytorch": {
            name: round(torch_ms / timing["median_ms"], 2)
            for name, timing in timings.items()
            if name != "pytorch"
        },
    }
    if workload.flops is not None:
        gflops = {
            name: workload.flops / (timing["median_ms"] / 1e3) / 1e9 for name, timing in timings.items()
        }
        result["gflop_per_call"] = round(workload.flops / 1e9, 2)
        result["gflops"] = {name: round(value, 1) for name, value in gflops.items()}
        result["fraction_of_sgemm"] = {name: round(value / sgemm, 3) for name, value in gflops.items()}
    if workload.outputs:
        reference = workload.outputs.get("pytorch")
        result["tokens_generated"] = {name: len(tokens) for name, tokens in workload.outputs.items()}
        result["same_tokens_as_pytorch"] = {
            name: tokens == reference for name, tokens in workload.outputs.items() if name != "pytorch"
        }
    return result


def run_benchmark(options: BenchOptions, *, progress: Progress | None = None) -> dict:
    import torch

    from onnxformer.builder.training.checkpoint import load_checkpoint
    from onnxformer.runtime.loader import open_export

    say = progress or (lambda message: None)
    monitor = LoadMonitor().start()
    torch.set_num_threads(options.threads)
    warmup = 1 if options.quick else options.warmup
    repeats = 3 if options.quick else options.repeats
    models = prepare_models(options.work, families=options.families, fresh=options.fresh, progress=say)
    say("machine: SGEMM")
    sgemm = sgemm_gflops(options.threads)  # measured again at the end: the better of the two is kept
    workloads = []
    for family in options.families:
        bench = models[family]
        model = load_checkpoint(bench.checkpoint).model.eval()
        exports = {
            name: open_export(folder, device="cpu", threads=options.threads)
            for name, folder in bench.folders.items()
        }
        with torch.inference_mode():
            for workload in BUILDERS[family](model, exports, quick=options.quick):
                say(f"timing {workload.title}")
                timings = time_workload(workload, warmup=warmup, repeats=repeats)
                workloads.append(_summary(workload, timings, sgemm["limit"]))
        del model, exports
        gc.collect()
    again = sgemm_gflops(options.threads)
    sgemm = {name: max(value, again[name]) for name, value in sgemm.items()}
    for workload in workloads:
        if "gflops" in workload:
            workload["fraction_of_sgemm"] = {
                name: round(value / sgemm["limit"], 3) for name, value in workload["gflops"].items()
            }
    startup = {}
    if "gpt" in options.families:
        for name in ("onnx", "fused", "int8"):
            say(f"start-up: GPT {name}")
            startup[name] = measure_startup(models["gpt"].folders[name], threads=options.threads)
    accuracy = _int8_accuracy(options, say) if options.accuracy else {}
    result = {
        "schema": SCHEMA,
        "command": _command_line(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_facts(options.threads),
        "settings": {
            "threads": options.threads,
            "warmup": warmup,
            "repeats": repeats,
            "quick": options.quick,
            "variants": {
                "pytorch": "PyTorch eager fp32 (torch.inference_mode)",
                "onnx": "runtime on the plain export",
                "fused": "runtime on optimize_export: fused attention, SkipLayerNorm, BiasGelu, packed QKV",
                "int8": "runtime on optimize_export --int8 (dynamic quantization of the MatMul weights)",
            },
            "models": {family: models[family].config for family in options.families},
        },
        "sgemm_gflops": sgemm,
        "workloads": workloads,
        "startup": startup,
        "int8_accuracy": accuracy,
    }
    result["targets"] = evaluate_targets(result)
    result["load"] = monitor.stop()
    return result


def _command_line() -> str:
    """What ran, as the checkout's root runs it (`onnxformer bench` runs `python -m benchmarks` there)."""
    return " ".join(["python -m benchmarks", *sys.argv[1:]])


def _int8_accuracy(options: BenchOptions, say: Progress) -> dict:
    """int8's cost on the committed tiny models: task metrics and cosine to PyTorch of the main output."""
    from onnxformer.builder.optimize import optimize_export
    from onnxformer.builder.optimize.quality import MAIN_OUTPUTS

    exported = options.exported or Path(__file__).resolve().parents[1] / "exported"
    results = {}
    for family in ("bert", "gpt", "t5"):
        folder = exported / family
        if not (folder / "manifest.json").is_file():
            continue
        say(f"int8 accuracy: tiny {family}")
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):
            manifest = optimize_export(folder, Path(tmp) / family, quantize="int8")
        record = manifest.extra["optimization"]
        cosine = {}
        for role, path in manifest.graphs.items():
            if (family, role) in MAIN_OUTPUTS:
                output = MAIN_OUTPUTS[(family, role)]
                cosine[f"{path}:{output}"] = round(record["agreement"][path]["min_cosine"][output], 6)
        results[family] = {"tasks": record.get("tasks", {}), "min_cosine_to_pytorch": cosine}
    return results
