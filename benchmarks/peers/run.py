"""`onnxformer bench --peers`: our runtime side by side with the tools users would pick instead.

Per family (encoder, decoder, seq2seq): build the models (models.py), start one worker per tool in its
own environment (envs.py), load each tool's model and prepare every workload's inputs in it, then per
workload warm every tool up and time the tools alternately, the order reversed every other repetition,
sleeping PAUSE_S before each call (ONNX Runtime and PyTorch leave their threads spinning for a while
after a call, see benchmarks/run.py). The orchestrator waits for each answer before the next request, so
only one worker computes at a time; every tool gets the same thread count. Medians, min and max per tool;
the ratios peer median / our median (above 1: we are faster) against each peer of the same precision and
the best of them. After a family's workloads, a tool's own benchmark program (llama.cpp's llama-bench) runs
as a cross-check of its worker's figures. With the decoder family, the quality comparison (quality.py)
runs last, on a small trained Llama: every tool's quantized next-token distributions against our fp32's.
"""

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

import numpy as np

from benchmarks.peers.ceiling import ceiling_rows
from benchmarks.peers.checks import output_checks
from benchmarks.peers.envs import ENVS, Worker, WorkerError, env_versions
from benchmarks.peers.models import PREPARE, Builder, prepare_quality
from benchmarks.peers.quality import measure_quality
from benchmarks.peers.workloads import FAMILY_ENVS, KINDS, TOOLS, WORKLOADS, Tool, Workload
from onnxformer.runtime.errors import ConfigError, OnnxformerError

SCHEMA = 1
PAUSE_S = 0.25
FAMILIES = ("encoder", "decoder", "seq2seq")
TARGET, AIM = 1.0, 1.2  # our median against the best peer's of the same precision
PRECISIONS = ("fp32", "int8", "int4")  # the weights' type; a tool is compared within its own
Progress = Callable[[str], None]


class Timer(Protocol):
    def time(self, key: str, inner: int) -> float: ...


@dataclass(frozen=True)
class PeersOptions:
    work: Path
    threads: int
    warmup: int = 2
    repeats: int = 5
    quick: bool = False
    fresh: bool = False
    families: tuple[str, ...] = FAMILIES


def stats(values: list[float]) -> dict:
    return {
        "median_ms": round(float(np.median(values)), 3),
        "min_ms": round(min(values), 3),
        "max_ms": round(max(values), 3),
        "samples": len(values),
    }


def time_alternating(
    timers: dict[str, Timer],
    key: str,
    *,
    inner: int,
    warmup: int,
    repeats: int,
    pause: float = PAUSE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[dict[str, dict], dict[str, str]]:
    """Per tool: median, min and max ms per call; a tool whose worker fails is dropped (its error kept)."""
    names = list(timers)
    errors: dict[str, str] = {}
    samples: dict[str, list[float]] = {name: [] for name in names}

    def call(name: str) -> float | None:
        try:
            return timers[name].time(key, inner)
        except WorkerError as error:
            errors[name] = str(error)
            return None

    for name in names:
        for _ in range(warmup):
            if name not in errors:
                call(name)
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            if name in errors:
                continue
            sleep(pause)
            value = call(name)
            if value is not None:
                samples[name].append(value)
    return {name: stats(values) for name, values in samples.items() if values and name not in errors}, errors


def compare(timings: dict[str, dict], tools: dict[str, Tool]) -> list[dict]:
    """For each of our variants: the ratio peer median / our median against every peer of its precision
    and against the best (fastest) of them."""
    rows = []
    for precision in PRECISIONS:
        peers = {
            n: t["median_ms"]
            for n, t in timings.items()
            if not tools[n].ours and tools[n].precision == precision
        }
        for name, timing in timings.items():
            if not tools[name].ours or tools[name].precision != precision:
                continue
            ours = timing["median_ms"]
            row = {"precision": precision, "ours": name, "ours_median_ms": ours}
            row["ratios"] = {peer: round(median / ours, 3) for peer, median in peers.items()}
            if peers:
                best = min(peers, key=peers.get)
                row.update(best_peer=best, best_peer_median_ms=peers[best], ratio_vs_best=row["ratios"][best])
            else:
                row.update(best_peer=None, best_peer_median_ms=None, ratio_vs_best=None)
            rows.append(row)
    return rows


def _start(tool: Tool, threads: int, logs: Path, failures: list, family: str) -> Worker | None:
    worker = Worker(
        tool.name, ENVS[tool.env], threads=threads, log=logs / f"{family}-{tool.name.replace(':', '-')}.log"
    )
    try:
        worker.versions = worker.request("load", tool=tool.module, args={**tool.args, "threads": threads})[
            "versions"
        ]
        return worker
    except WorkerError as error:
        failures.append({"family": family, "tool": tool.name, "stage": "load", "error": str(error)})
        worker.close()
        return None


def run_family(
    family: str, models: dict, options: PeersOptions, say: Progress, failures: list
) -> tuple[dict, list]:
    tools = {tool.name: tool for tool in TOOLS[family](models)}
    workloads: list[Workload] = WORKLOADS[family](models, quick=options.quick)
    warmup = 1 if options.quick else options.warmup
    repeats = 3 if options.quick else options.repeats
    workers: dict[str, Worker] = {}
    described = {}
    results = []
    try:
        for tool in tools.values():
            say(f"{family}: loading {tool.name}")
            worker = _start(tool, options.threads, options.work / "logs", failures, family)
            if worker is not None:
                workers[tool.name] = worker
                described[tool.name] = {
                    "what": tool.what,
                    "precision": tool.precision,
                    "env": ENVS[tool.env].venv,
                    "versions": worker.versions,
                }
        for workload in workloads:
            timers = {}
            for name, worker in workers.items():
                if workload.kind not in KINDS[tools[name].module]:
                    continue
                try:
                    worker.request("prepare", key=workload.key, kind=workload.kind, args=workload.args)
                    timers[name] = worker
                except WorkerError as error:
                    failure = {"family": family, "tool": name, "workload": workload.key, "stage": "prepare"}
                    failures.append({**failure, "error": str(error)})
            say(f"timing {workload.title} ({len(timers)} tools)")
            count = min(repeats, workload.max_repeats or repeats)
            warm = min(warmup, 1) if workload.max_repeats else warmup  # one warm-up call of many seconds
            timings, errors = time_alternating(
                timers, workload.key, inner=workload.inner, warmup=warm, repeats=count
            )
            for name, error in errors.items():
                failures.append(
                    {
                        "family": family,
                        "tool": name,
                        "workload": workload.key,
                        "stage": "time",
                        "error": error,
                    }
                )
            result = {
                "family": family,
                "key": workload.key,
                "title": workload.title,
                "unit": workload.unit,
                "calls_per_sample": workload.inner,
                "warmup": warm,
                "repeats": count,
                "tools": timings,
                "comparisons": compare(timings, tools),
            }
            if workload.check:
                result["checks"] = output_checks(workload, {n: workers[n] for n in timings}, tools)
            results.append(result)
        for name in workers:  # the workers are idle meanwhile: only one program computes at a time
            if tools[name].own_bench is not None:
                say(f"{family}: {name}'s own benchmark")
                try:
                    described[name]["own_bench"] = tools[name].own_bench(options.threads, repeats)
                except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as error:
                    failures.append(
                        {"family": family, "tool": name, "stage": "own_bench", "error": str(error)}
                    )
    finally:
        for worker in workers.values():
            worker.close()
    return described, results


def targets(workloads: list[dict]) -> list[dict]:
    """Ours >= TARGET x the best peer of the same precision on every workload (aim: AIM x)."""
    rows = []
    for workload in workloads:
        for row in workload["comparisons"]:
            value = row["ratio_vs_best"]
            peer = f"best {row['precision']} peer ({row['best_peer']})"
            rows.append(
                {
                    "target": f"{workload['title']}: {row['ours']} vs {peer}",
                    "value": value,
                    "wanted": f">= {TARGET}x (aim {AIM}x)",
                    "met": None if value is None else value >= TARGET,
                    "aim_met": None if value is None else value >= AIM,
                }
            )
    return rows


def run_peers(options: PeersOptions, *, progress: Progress | None = None) -> dict:
    from benchmarks.machine import LoadMonitor, machine_facts

    say = progress or (lambda message: None)
    used = [name for name in ENVS if any(name in FAMILY_ENVS[family] for family in options.families)]
    for name in used:
        ENVS[name].check()
    monitor = LoadMonitor().start()
    builder = Builder(options.work, fresh=options.fresh, progress=say)
    failures: list[dict] = []
    tools: dict[str, dict] = {}
    workloads: list[dict] = []
    models = {}
    for family in options.families:
        models[family] = PREPARE[family](builder)
    trained = None
    if "decoder" in options.families:
        try:
            trained = prepare_quality(builder)
        except ConfigError as error:  # the timings go on without the quality comparison
            failures.append(
                {"family": "quality", "tool": "trained Llama", "stage": "build", "error": str(error)}
            )
    failures += builder.failures
    started = time.perf_counter()
    for family in options.families:
        tools[family], results = run_family(family, models[family], options, say, failures)
        workloads += results
    timing_s = round(time.perf_counter() - started, 1)
    quality = None
    if trained is not None:  # after the timings, which it must not disturb; 10 to 30 s
        try:
            quality = measure_quality(
                trained, threads=options.threads, logs=options.work / "logs", say=say, failures=failures
            )
        except (OnnxformerError, OSError, ValueError) as error:  # the timings are kept
            failures.append({"family": "quality", "tool": "-", "stage": "measure", "error": str(error)})
    result = {
        "schema": SCHEMA,
        "command": " ".join(["python -m benchmarks", *sys.argv[1:]]),  # as run.py records it
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_facts(options.threads),
        "settings": {
            "threads": options.threads,
            "warmup": 1 if options.quick else options.warmup,
            "repeats": 3 if options.quick else options.repeats,
            "quick": options.quick,
            "pause_s": PAUSE_S,
            "timing_s": timing_s,
            "models": {family: str(models[family]["source"]) for family in options.families},
        },
        "environments": {
            name: {"venv": ENVS[name].venv, "packages": env_versions(ENVS[name])} for name in used
        },
        "tools": tools,
        "workloads": workloads,
        "failures": failures,
    }
    if quality is not None:
        result["quality"] = quality
    result["targets"] = targets(workloads)
    result["ceiling"] = ceiling_rows(result, models)  # decoder steps against the memory-bandwidth ceiling
    result["load"] = monitor.stop()
    return result
