"""`onnxformer attention DIR "text"`: highlight the tokens one token attends to (torch-free)."""

import re
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from onnxformer.cli.errors import stderr, user_errors
from onnxformer.cli.options import Device
from onnxformer.cli.outputs import check_png_out, parse_path
from onnxformer.cli.printing import console, echo_json
from onnxformer.runtime.attention import AttentionMap, attention_map, check_plotting, save_heatmaps
from onnxformer.runtime.errors import InputError, OnnxformerError
from onnxformer.runtime.session import device_of

DEFAULT_TOKEN = "sat"  # the seed sentence's verb: "The cat sat on the mat."
TABLE_ROWS = 16


def attention_command(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="A model export folder (gpt, bert or t5).")],
    text: Annotated[str, typer.Argument(help="The sentence to look at, e.g. 'The cat sat on the mat.'")],
    token: Annotated[
        str | None,
        typer.Option(
            help="The token whose attention to show: its text ('sat') or its position (0 = the first "
            "token, counting the `<s>` or `<cls>` the model adds). Default: 'sat' if the sentence has "
            "it, else the sentence's last token."
        ),
    ] = None,
    layer: Annotated[str, typer.Option(help="A layer number (0 = first), or avg to average all.")] = "avg",
    head: Annotated[str, typer.Option(help="A head number (0 = first), or avg to average all.")] = "avg",
    cross: Annotated[
        bool, typer.Option("--cross", help="T5 only: the decoder's attention to the source while it writes.")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            parser=parse_path,
            help="Also write a PNG grid of heatmaps, one per layer and head, to this .png file "
            "(default: none; needs matplotlib).",
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace a heatmap PNG that onnxformer wrote at --out.")
    ] = False,
    device: Device = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print tokens, the row and all weights.")] = False,
) -> None:
    """Show which tokens one token attends to: the sentence highlighted by attention weight and the
    weights as a table; with --out, also a PNG heatmap per layer and head (needs matplotlib: the `plot`
    extra). A file at --out is replaced only if it is a heatmap onnxformer wrote, and only with
    --overwrite. Runs without torch."""
    with user_errors(ctx):
        levels = _level(layer, "--layer"), _level(head, "--head")
        if out is not None:
            check_png_out(out, overwrite=overwrite)
            _require_plotting(ctx)  # asked for a PNG: say what is missing before any work
        attention = attention_map(folder, text, kind="cross" if cross else "self", device=device_of(device))
        index = attention.query_index(_token(attention, token))
        row = attention.row(index, layer=levels[0], head=levels[1])  # (K,)
        png = None if out is None else save_heatmaps(attention, out)
    if as_json:
        echo_json(_payload(attention, index, levels, row, png), indent=None)
        return
    _show(attention, index, levels, row)
    if png is not None:
        console.print(f"heatmaps ({attention.layers} layers x {attention.heads} heads): {png}", markup=False)
    else:
        console.print("(--out FILE.png also draws a heatmap per layer and head)", markup=False, style="dim")


def _level(value: str, option: str) -> int | None:
    """ "avg" -> None (the average), "2" -> 2; the range is checked against the model later."""
    if value.strip().lower() in ("avg", "average", "mean"):
        return None
    if re.fullmatch(r"\d+", value.strip()):
        return int(value)
    raise InputError(f"{option} must be a number (0 = first) or avg, got {value!r}")


def _token(attention: AttentionMap, token: str | None) -> str | int:
    """A token's text wins over reading it as a position, so a "3" in the text is still found."""
    if token is None:
        if _matches(attention, DEFAULT_TOKEN):
            return DEFAULT_TOKEN
        words = [i for i, t in enumerate(attention.query_ids) if t not in attention.special_ids]
        return words[-1] if words else -1  # the text's last token, not </s> or <sep>
    if not _matches(attention, token) and re.fullmatch(r"-?\d+", token.strip()):
        return int(token)
    return token


def _matches(attention: AttentionMap, token: str) -> bool:
    try:
        attention.query_index(token)
    except InputError:
        return False
    return True


def _require_plotting(ctx: typer.Context) -> None:
    """`check_plotting`, its message printed as plain text: `user_errors` would read the "[plot]" of
    `pip install "onnxformer[plot]"` as rich markup and drop it."""
    try:
        check_plotting()
    except OnnxformerError as error:
        if ctx.obj and ctx.obj.get("debug"):
            raise
        stderr.print(Text.assemble(("error:", "bold red"), f" {error}"), soft_wrap=True)
        raise typer.Exit(1) from None


def _describe(attention: AttentionMap, index: int, levels: tuple[int | None, int | None]) -> str:
    layer, head = levels
    over = {
        (True, True): f"averaged over {attention.layers} layers and {attention.heads} heads",
        (False, True): f"layer {layer}, averaged over {attention.heads} heads",
        (True, False): f"head {head}, averaged over {attention.layers} layers",
        (False, False): f"layer {layer}, head {head}",
    }[(layer is None, head is None)]
    chosen = attention.query_tokens[index]
    if attention.kind == "cross":
        return f"t5 cross-attention while writing {chosen!r} (output token {index}), {over}"
    return f"{attention.family} self-attention from {chosen!r} (token {index}), {over}"


def _show(
    attention: AttentionMap, index: int, levels: tuple[int | None, int | None], row: np.ndarray
) -> None:
    console.print(Text(_describe(attention, index, levels), style="bold"), soft_wrap=True)
    specials = attention.special_ids
    if attention.kind == "cross":
        styles = ["bold underline" if i == index else "" for i in range(len(attention.query_ids))]
        console.print(_sentence("output: ", attention.query_pieces, attention.query_ids, specials, styles))
    top = max(float(row.max()), 1e-12)
    styles = [_heat(float(weight) / top) for weight in row]
    if attention.kind == "self":
        styles[index] += " bold underline"
    label = "source: " if attention.kind == "cross" else ""
    console.print(_sentence(label, attention.key_pieces, attention.key_ids, specials, styles))
    table = Table(box=None, pad_edge=False)
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("#", "right"),
        ("token", "left"),
        ("weight", "right"),
        ("", "left"),
    )
    for column, justify in columns:
        table.add_column(column, justify=justify)
    order = np.argsort(-row, kind="stable")  # (K,) heaviest first
    for key in order[:TABLE_ROWS].tolist():
        bar = "█" * round(20 * float(row[key]))
        table.add_row(str(key), Text(attention.key_tokens[key]), f"{row[key]:.3f}", Text(bar, style="yellow"))
    if len(order) > TABLE_ROWS:
        table.caption = f"{len(order) - TABLE_ROWS} lighter tokens not shown (--json has them all)"
    console.print(table)


def _sentence(
    label: str, pieces: list[str], ids: list[int], specials: frozenset[int], styles: list[str]
) -> Text:
    """The tokens as they read in the text, each in its own style; specials set apart by a space."""
    line = Text(label)
    for position, (piece, token_id, style) in enumerate(zip(pieces, ids, styles, strict=True)):
        word = piece.lstrip(" ") or piece
        gap = piece[: len(piece) - len(word)]
        if position > 0 and not gap and (token_id in specials or ids[position - 1] in specials):
            gap = " "
        line.append(gap)
        line.append(word, style=style)
    return line


def _heat(strength: float) -> str:
    """A background from dark red (light weight) to yellow (the heaviest), with readable text on it;
    dim without background for weights too small to see."""
    if strength < 0.005:
        return "dim"
    red, green, blue = round(90 + 165 * strength), round(20 + 200 * strength), round(10 * (1 - strength))
    return f"{'black' if strength > 0.45 else 'white'} on rgb({red},{green},{blue})"


def _payload(
    attention: AttentionMap,
    index: int,
    levels: tuple[int | None, int | None],
    row: np.ndarray,
    png: Path | None,
) -> dict:
    return {
        "family": attention.family,
        "kind": attention.kind,
        "text": attention.text,
        "output_text": attention.output_text,
        "query_tokens": attention.query_tokens,
        "key_tokens": attention.key_tokens,
        "token": {"index": index, "text": attention.query_tokens[index]},
        "layer": levels[0],
        "head": levels[1],
        "row": row.tolist(),
        "weights": attention.weights.tolist(),  # (layers, heads, queries, keys)
        "png": None if png is None else str(png),
    }
