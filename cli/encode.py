"""`onnxformer encode DIR "text" ...`: sentence embeddings and classification with a BERT export."""

from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import typer
from rich.table import Table

from onnxformer.cli.errors import user_errors
from onnxformer.cli.options import (
    Device,
    NoTruncate,
    TextFile,
    Threads,
    gather_texts,
    load_model,
    noting_truncation,
)
from onnxformer.cli.printing import console, echo_json

PAIRS_SHOWN = 8  # texts up to which the pairwise cosines are printed unless asked otherwise
EMBEDDING_SHOWN = 4  # values of each embedding the table shows when there are no labels (--json: all)


def encode_command(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="A BERT export folder (from `onnxformer export`).")],
    texts: Annotated[
        list[str] | None, typer.Argument(help="Texts to embed; with several, their similarities.")
    ] = None,
    file: TextFile = None,
    similarity: Annotated[
        Literal["auto", "pairs", "matrix", "none"],
        typer.Option(
            help=f"How to print the cosine similarities: pairs (one line per pair), matrix, or none; auto "
            f"= pairs for up to {PAIRS_SHOWN} texts, else none."
        ),
    ] = "auto",
    normalize: Annotated[
        bool,
        typer.Option("--normalize", help="L2-normalise the embeddings (--json), as sentence-transformers."),
    ] = False,
    no_truncate: NoTruncate = False,
    device: Device = "auto",
    threads: Threads = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print embeddings (and labels) as JSON.")] = False,
) -> None:
    """Embed texts (the export's sentence embeddings) and compare them by cosine similarity; when the
    export has a classifier, also classify each (the built-in task: well-formed sentence or shuffled
    words). Runs without torch."""
    with user_errors(ctx):
        texts = gather_texts(texts, file, what="text")
        model = load_model(folder, "encode", device, threads)
        truncate = not no_truncate
        with noting_truncation(model, texts, truncate=truncate):
            embeddings = model.embed(texts, normalize=normalize, truncate=truncate)
            classes = model.classify(texts, truncate=truncate) if model.has_classifier else None
    unit = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    cosine = unit @ unit.T  # (N, N)
    if as_json:
        rows = [{"text": t, "embedding": e.tolist()} for t, e in zip(texts, embeddings, strict=True)]
        for row, result in zip(rows, classes or (), strict=False):
            row.update(label=result.label, probabilities=result.probabilities.tolist())
        payload = {"provider": model.provider, "normalized": normalize, "results": rows}
        if similarity != "none":
            payload["cosine_similarity"] = cosine.tolist()
        echo_json(payload, indent=None)
        return
    table = Table(title=f"{len(texts)} text(s), {embeddings.shape[1]}-dimensional embeddings")
    columns = ("#", "text", "label", "p(label)") if classes is not None else ("#", "text", "embedding")
    for column in columns:
        table.add_column(column, overflow="fold")
    for index, text in enumerate(texts):
        if classes is None:  # no classifier (a sentence-transformers model): the embedding's first values
            shown = " ".join(f"{value:+.4f}" for value in embeddings[index, :EMBEDDING_SHOWN])
            table.add_row(str(index), text, f"[{shown}{' ...' * (embeddings.shape[1] > EMBEDDING_SHOWN)}]")
            continue
        result = classes[index]
        name = model.label_names.get(result.label, str(result.label))
        table.add_row(str(index), text, name, f"{result.probabilities[result.label]:.3f}")
    console.print(table)
    _print_similarity(cosine, similarity)


def _print_similarity(cosine: np.ndarray, how: str) -> None:
    count = len(cosine)
    if count < 2 or how == "none":
        return
    if how == "auto" and count > PAIRS_SHOWN:
        pairs = count * (count - 1) // 2
        console.print(f"{pairs} pairwise similarities not shown: --similarity pairs or matrix prints them")
        return
    if how == "matrix":
        table = Table(title="cosine similarity", box=None)
        table.add_column("#", justify="right")
        for j in range(count):
            table.add_column(str(j), justify="right")
        for i in range(count):
            table.add_row(str(i), *(f"{cosine[i, j]:.4f}" for j in range(count)))
        console.print(table)
        return
    for i in range(count):
        for j in range(i + 1, count):
            console.print(f"cosine similarity #{i} ~ #{j}: {cosine[i, j]:.4f}")
