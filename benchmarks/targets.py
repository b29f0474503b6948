"""The issue's targets, read off a benchmark result. Figures only: nothing here is a timed test.

Speedups are PyTorch median / runtime median (above 1: the runtime is faster). The fp32 targets are held
by the `fused` variant (the optimised fp32 export); `int8` is reported against PyTorch fp32 as well.
"""

from typing import Any


def _workload(result: dict, key: str) -> dict | None:
    return next((w for w in result["workloads"] if w["key"] == key), None)


def _target(name: str, value: float | bool | None, target: str, met: bool | None, note: str = "") -> dict:
    return {"target": name, "value": value, "wanted": target, "met": met, "note": note}


def evaluate_targets(result: dict) -> list[dict[str, Any]]:
    rows = []
    for key, floor in (("encoder_32x128", 1.3), ("encoder_1x16", 2.0)):
        workload = _workload(result, key)
        if workload is None:
            continue
        for variant in ("fused", "int8"):
            speedup = workload["speedup_vs_pytorch"].get(variant)
            rows.append(
                _target(
                    f"{workload['title']}: {variant} vs PyTorch fp32",
                    speedup,
                    f">= {floor}x",
                    speedup >= floor,
                )
            )
    decode = {}
    for key in ("gpt_decode_16", "gpt_decode_256", "gpt_decode_1024"):
        workload = _workload(result, key)
        if workload is None:
            continue
        decode[key] = workload
        for variant in ("fused", "int8"):
            speedup = workload["speedup_vs_pytorch"].get(variant)
            rows.append(
                _target(f"{workload['title']}: {variant} vs PyTorch", speedup, ">= 2x", speedup >= 2.0)
            )
    if "gpt_decode_16" in decode and "gpt_decode_1024" in decode:
        for variant in ("fused", "int8", "pytorch"):
            short = decode["gpt_decode_16"]["variants"][variant]["median_ms"]
            long = decode["gpt_decode_1024"]["variants"][variant]["median_ms"]
            ratio = round(long / short, 2)
            met = ratio <= 2.0 if variant != "pytorch" else None
            rows.append(_target(f"decode latency context 1024 / 16: {variant}", ratio, "<= 2x", met))
    for key in ("encoder_1x16", "encoder_32x128"):
        workload = _workload(result, key)
        if workload is None:
            continue
        fused = workload["variants"]["fused"]["median_ms"]
        int8 = workload["variants"]["int8"]["median_ms"]
        ratio = round(fused / int8, 2)
        rows.append(
            _target(f"{workload['title']}: int8 vs fused fp32 runtime", ratio, ">= 1.5x", ratio >= 1.5)
        )
    for family, record in result.get("int8_accuracy", {}).items():
        for metric, change in record.get("tasks", {}).get("change", {}).items():
            if metric.endswith(("accuracy", "exact_match")):
                points = round(change * 100, 2)
                rows.append(
                    _target(f"int8 tiny {family} {metric} change (points)", points, ">= -1", points >= -1)
                )
        for output, cosine in record.get("min_cosine_to_pytorch", {}).items():
            if "embedding" in output:
                rows.append(
                    _target(f"int8 tiny {family} {output} cosine (min)", cosine, ">= 0.99", cosine >= 0.99)
                )
    for variant, startup in result.get("startup", {}).items():
        if variant == "onnx":
            continue
        seconds = startup["import_and_load_s"]
        rows.append(_target(f"start-up GPT {variant}: import + load", seconds, "<= 1 s", seconds <= 1.0))
        rss = startup["rss_mb"]
        rows.append(_target(f"start-up GPT {variant}: resident memory (MB)", rss, "<= 250", rss <= 250))
        rows.append(
            _target(
                f"start-up GPT {variant}: torch imported",
                startup["torch_loaded"],
                "never",
                not startup["torch_loaded"],
            )
        )
    return rows
