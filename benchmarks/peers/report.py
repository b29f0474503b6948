"""A peers result as tables: per workload and precision, each tool's median and our ratio to the best peer."""

from rich.table import Table


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def comparison_rows(result: dict) -> list[list[str]]:
    """[workload, precision, unit, ours, its ms, best peer, its ms, ratio, every peer: ms (ratio)]."""
    rows = []
    for workload in result["workloads"]:
        for row in workload["comparisons"]:
            peers = ", ".join(
                f"{peer} {workload['tools'][peer]['median_ms']:.2f} ({ratio:.2f}x)"
                for peer, ratio in sorted(row["ratios"].items(), key=lambda item: -item[1])
            )
            ratio = "-" if row["ratio_vs_best"] is None else f"{row['ratio_vs_best']:.2f}x"
            rows.append(
                [
                    workload["title"],
                    row["precision"],
                    workload["unit"],
                    row["ours"],
                    _ms(row["ours_median_ms"]),
                    row["best_peer"] or "(no peer)",
                    _ms(row["best_peer_median_ms"]),
                    ratio,
                    peers,
                ]
            )
    return rows


HEADER = ["workload", "precision", "unit", "ours", "ms", "best peer", "ms", "ours x", "peers: ms (ours x)"]


def check_rows(result: dict) -> list[list[str]]:
    rows = []
    for workload in result["workloads"]:
        checks = workload.get("checks") or {}
        for name, check in checks.get("tools", {}).items():
            if "cosine_to_reference_min" in check:
                text = (
                    f"cosine to {checks['reference']}: min {check['cosine_to_reference_min']:.5f}, mean "
                    f"{check['cosine_to_reference_mean']:.5f}; {check['retrieval_queries']} queries: "
                    f"recall@1 {check['retrieval_recall_at_1']:.2f}, "
                    f"worst rank {check['retrieval_worst_rank']}"
                )
            else:
                text = (
                    f"{check['rows_equal']}/{check['rows']} rows equal to {checks['reference']}'s tokens, "
                    f"common prefix {check['mean_common_prefix']} of {max(check['new_tokens'], default=0)}"
                )
            rows.append([workload["title"], name, text])
    return rows


def ceiling_table_rows(result: dict) -> list[list[str]]:
    """[workload, tool, precision, MB per step (weights + KV), step ms, ceiling ms, GB/s, share]."""
    rows = []
    for row in result.get("ceiling", []):
        if "error" in row:  # printed below the table
            continue
        share = row["share_of_read_bandwidth"]
        rows.append(
            [
                row["title"],
                row["tool"],
                row["precision"] or "-",
                f"{row['bytes_per_step_mb']:.1f} ({row['weights_mb']:.1f} + {row['kv_cache_mb']:.1f})",
                _ms(row["step_ms"]),
                _ms(row["ceiling_ms"]),
                f"{row['achieved_gbs']:.1f}",
                "-" if share is None else f"{share:.2f}" + (" (fits LLC)" if row["fits_in_llc"] else ""),
            ]
        )
    return rows


CEILING_HEADER = [
    "workload",
    "tool",
    "precision",
    "MB/step (weights + KV)",
    "step ms",
    "ceiling ms",
    "GB/s",
    "share",
]


def print_ceiling(console, result: dict) -> None:
    """The decoder workloads against the memory-bandwidth ceiling (benchmarks/peers/ceiling.py)."""
    if not result.get("ceiling"):
        return
    bandwidth = result["machine"].get("memory_bandwidth") or {}
    console.print(
        f"memory bandwidth at {bandwidth.get('threads', '?')} threads: read {bandwidth.get('read_gbs', '?')} "
        f"GB/s, copy {bandwidth.get('copy_gbs', '?')}, triad {bandwidth.get('triad_gbs', '?')} "
        f"({bandwidth.get('array_mb', '?')} MB arrays; last-level cache "
        f"{result['machine'].get('last_level_cache_mb', '?')} MB)"
    )
    table = Table(
        *CEILING_HEADER,
        title="decode steps against the read-bandwidth ceiling (share = ceiling ms / step ms; 1 is the wall)",
    )
    for row in ceiling_table_rows(result):
        table.add_row(*row)
    console.print(table)
    for row in result["ceiling"]:
        if "error" in row:
            console.print(f"[yellow]ceiling: {row['tool']} not counted: {row['error']}[/yellow]")


QUALITY_HEADER = ["tool", "precision", "KL (nats)", "top-1", "perplexity", "change", "max |logit diff|"]
PRECISION_ORDER = {"fp32": 0, "int8": 1, "int4": 2}


def quality_rows(result: dict) -> list[list[str]]:
    """[tool, precision, KL, top-1, perplexity, its change, max |logit diff|] per tool of
    result["quality"], fp32 first, then int8, int4 (each in the order measured)."""
    tools = (result.get("quality") or {}).get("tools") or {}
    ordered = sorted(tools.items(), key=lambda item: PRECISION_ORDER.get(item[1]["precision"], 3))
    return [
        [
            name,
            tool["precision"],
            f"{tool['kl']:.2e}",
            f"{tool['top1']:.4f}",
            f"{tool['perplexity']:.4f}",
            f"{100 * tool['perplexity_change']:+.3f} %",
            f"{tool['max_abs_logit_diff']:.2g}",
        ]
        for name, tool in ordered
    ]


def quality_title(quality: dict) -> str:
    """The trained model and the text, in one line."""
    model = quality["model"]
    held_out = model.get("held_out") or {}
    shape = (
        f"Llama hidden {model['hidden_size']}, {model['num_hidden_layers']} layers, "
        f"{model['num_attention_heads']} heads ({model['num_key_value_heads']} KV), FFN "
        f"{model['intermediate_size']}, vocabulary {model['vocab_size']}"
    )
    figures = ""
    if held_out:
        figures = (
            f"; held-out loss {held_out['loss']:.3f} nats, mean entropy {held_out['mean_entropy']:.2f} of at "
            f"most {held_out['max_entropy']:.2f}"
        )
    return (
        f"quality against {quality['reference']} on {quality['text']} ({quality['rows']} rows, "
        f"{quality['positions']} positions, teacher forced): {shape}{figures}"
    )


def print_quality(console, result: dict) -> None:
    """The quantized decoders' quality table (benchmarks/peers/quality.py), the fp32 check and our
    gate's verdicts; its failures are printed with the run's."""
    quality = result.get("quality")
    if not quality:
        return
    table = Table(*QUALITY_HEADER, title=quality_title(quality))
    for row in quality_rows(result):
        table.add_row(*row)
    console.print(table)
    check = quality.get("fp32_check")
    if check:
        verdict = "within" if check["within"] else "[red]NOT within[/red]"
        console.print(
            f"{quality['reference']} against {check['tool']}: max |logit diff| "
            f"{check['max_abs_logit_diff']:.2g}, {verdict} {check['tolerance']:g}"
        )
    uniform = (quality["model"].get("held_out") or {}).get("uninformative")
    if uniform:
        console.print(f"[yellow]quality: {uniform}[/yellow]")
    for name, gate in quality.get("gates", {}).items():
        verdict = "passed" if gate["passed"] else "[red]missed[/red]"
        console.print(f"{name}: our quality gate {verdict} when built, float32 kept: {gate['kept']}")
    if quality.get("error"):
        console.print(f"[red]quality: {quality['error']}[/red]")


def print_peers(console, result: dict) -> None:
    machine = result["machine"]
    console.print(
        f"{machine['cpu']}, {machine['logical_cpus']} logical CPUs, threads {result['settings']['threads']} "
        f"for every tool; timing took {result['settings']['timing_s']} s"
    )
    table = Table(*HEADER, title="ours against the peers (peer median / our median: above 1, ours is faster)")
    for row in comparison_rows(result):
        table.add_row(*row)
    console.print(table)
    checks = Table("workload", "tool", "check", title="outputs")
    for row in check_rows(result):
        checks.add_row(*row)
    console.print(checks)
    targets = result["targets"]
    met = sum(t["met"] is True for t in targets)
    missed = sum(t["met"] is False for t in targets)
    aim = sum(t["aim_met"] is True for t in targets)
    console.print(
        f"targets: {met} met, {missed} missed (ours >= 1.0x the best peer of its precision), {aim} at 1.2x"
    )
    print_ceiling(console, result)
    print_quality(console, result)
    for failure in result["failures"]:
        where = failure.get("workload") or failure["stage"]
        console.print(f"[red]{failure['family']} {failure['tool']} ({where}): {failure['error']}[/red]")
