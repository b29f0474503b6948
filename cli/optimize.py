"""`onnxformer optimize IN OUT [--int8 | --int4]`: a faster copy of a model export, its cost measured."""

from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.table import Table

from onnxformer.cli.errors import user_errors
from onnxformer.cli.outputs import Overwrite, check_export_out, parse_path
from onnxformer.cli.printing import console, echo_json
from onnxformer.runtime.errors import ConfigError

KVCacheOption = Annotated[
    Literal["in-place", "concat"],
    typer.Option(
        "--kv-cache",
        help="Decoders: in-place writes each step's keys and values into one preallocated buffer the "
        "runtime binds (a step's cost nearly flat in the context; the Python runtime and the Node, browser "
        "and C hosts run it); concat keeps past in, past + new out (what transformers.js runs).",
    ),
]


def optimize_command(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="A model export folder (from `onnxformer export`).")],
    out: Annotated[
        Path,
        typer.Argument(parser=parse_path, help="Folder to write the optimised export to (may be FOLDER)."),
    ],
    int8: Annotated[
        bool, typer.Option("--int8", help="Also quantize the weights of every MatMul to int8 (dynamic).")
    ] = False,
    int4: Annotated[
        bool,
        typer.Option(
            "--int4",
            help="Also quantize the MatMul weights, output head included, to 4 bits (MatMulNBits, int8 "
            "activations where the CPU has the kernel).",
        ),
    ] = False,
    block_size: Annotated[
        int, typer.Option(help="With --int4: input rows per block of 4-bit weights (32 or 128).")
    ] = 32,
    eval_text: Annotated[
        Path | None,
        typer.Option(
            help="With --int8/--int4: a UTF-8 text file (one text per line) to measure the quality gate on "
            "[default: the built-in grammar's held-out sentences].",
        ),
    ] = None,
    gate: Annotated[
        bool,
        typer.Option(
            "--gate/--no-gate",
            help="With --int8/--int4: refuse a quantized model that departs too far from fp32 on held-out "
            "text (--no-gate for random weights, which no gate can judge; the manifest says so).",
        ),
    ] = True,
    fuse: Annotated[
        bool, typer.Option("--fuse/--no-fuse", help="Fuse attention, residual+LayerNorm and bias+GELU.")
    ] = True,
    tasks: Annotated[
        bool,
        typer.Option("--tasks/--no-tasks", help="With --int8/--int4, score the built-in tasks before/after."),
    ] = True,
    kv_cache: KVCacheOption = "in-place",
    overwrite: Overwrite = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the optimisation record as JSON.")] = False,
) -> None:
    """Rewrite the graphs the runtime runs for speed on ONNX Runtime: each attention becomes one
    MultiHeadAttention (a decoder's cached self-attention one GroupQueryAttention that writes its KV cache
    in place, unless --kv-cache concat), bias + GELU a BiasGelu; with --int8 the MatMul weights become
    int8, with --int4 4-bit blocks. The result is compared with the original on the export's golden inputs
    (fp32 must stay within the golden tolerance, int8 must keep a cosine of 0.99 to PyTorch). A quantized
    model must pass the quality gate against the fp32 export on held-out text (next-token KL divergence,
    top-1 agreement and perplexity change; an encoder's embedding cosine): where it misses, more of it is
    kept at a higher precision in turn (int8: the FFN output projections in 8-bit blocks, then in float32,
    then the output head; int4: the head in 8 bits, the FFN output projections, the first and last
    blocks), and if it still misses nothing is written. The task scores of the built-in tasks are
    measured with the heads the export has, and all of it is recorded in manifest.json
    (extra.optimization). The runtime loads the
    new folder like any export. OUT may be FOLDER (rewritten in place); another existing model export is
    replaced only with --overwrite."""
    with user_errors(ctx):
        if int8 and int4:
            raise ConfigError("--int8 and --int4 are two precisions; choose one")
        if not fuse and not int8 and not int4:
            raise ConfigError(
                "--no-fuse without --int8 or --int4 leaves nothing to do; add one, or drop --no-fuse"
            )
        if block_size not in (32, 128):  # builder.optimize.quantize.BLOCK_SIZES (the builder extra's)
            raise ConfigError(f"--block-size must be 32 or 128, got {block_size}")
        check_export_out(out, model=True, overwrite=overwrite, same_as=folder)
        from onnxformer.builder.optimize import optimize_export

        manifest = optimize_export(
            folder,
            out,
            fuse=fuse,
            quantize="int8" if int8 else "int4" if int4 else None,
            tasks=tasks,
            kv_cache=kv_cache,
            block_size=block_size,
            eval_text=eval_text,
            gate=gate,
        )
    record = manifest.extra["optimization"]
    if as_json:
        echo_json(record, sort_keys=True)
        return
    table = Table(title=f"{manifest.family} optimised to {out}")
    for column in ("file", "fused operators", "max diff to original", "min cosine to PyTorch"):
        table.add_column(column, overflow="fold")
    for path, agreement in record["agreement"].items():
        ops = ", ".join(f"{op} {count}" for op, count in record["fused_ops"][path].items())
        table.add_row(
            path,
            ops,
            f"{max(agreement['max_abs_diff'].values()):.1e}",
            f"{min(agreement['min_cosine'].values()):.5f}",
        )
    console.print(table)
    if record.get("kept", "nothing") != "nothing":
        console.print(f"kept at a higher precision to pass the quality bars: {record['kept']}")
    gate_record = record.get("gate", {})
    if "figures" in gate_record:
        figures = ", ".join(f"{name} {value:.4g}" for name, value in gate_record["figures"].items())
        console.print(f"quality gate on {gate_record['text']}: passed ({figures})")
    elif "skipped" in gate_record:
        console.print(f"quality gate skipped ({gate_record['skipped']})")
    if "skipped" in record.get("tasks", {}):
        console.print(f"task metrics not measured: {record['tasks']['skipped']}")
    for metric, change in record.get("tasks", {}).get("change", {}).items():
        before = record["tasks"]["original"][metric]
        console.print(f"{metric}: {before:.4f} -> {before + change:.4f} ({change:+.4f})")
