"""`onnxformer encode DIR "text" ...`: sentence embeddings and classification with a BERT export."""

import json
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from onnxformer.cli.errors import user_errors
from onnxformer.cli.options import Device, load_model
from onnxformer.runtime.encoder import LABELS

console = Console(highlight=False)


def encode_command(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="A BERT export folder (from `onnxformer export`).")],
    texts: Annotated[list[str], typer.Argument(help="Texts to embed; with several, their similarities.")],
    device: Device = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print embeddings and labels as JSON.")] = False,
) -> None:
    """Embed texts (mean-pooled sentence embeddings), compare them by cosine similarity, and classify
    each (the built-in task: well-formed sentence or shuffled words). Runs without torch."""
    with user_errors(ctx):
        model = load_model(folder, "encode", device)
        embeddings = model.embed(list(texts))
        classes = model.classify(list(texts))
    unit = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    similarity = unit @ unit.T
    if as_json:
        rows = [
            {"text": t, "embedding": e.tolist(), "label": c.label, "probabilities": c.probabilities.tolist()}
            for t, e, c in zip(texts, embeddings, classes, strict=True)
        ]
        payload = {"provider": model.provider, "results": rows, "cosine_similarity": similarity.tolist()}
        typer.echo(json.dumps(payload, ensure_ascii=False))
        return
    table = Table(title=f"{len(texts)} text(s), {embeddings.shape[1]}-dimensional embeddings")
    for column in ("#", "text", "label", "p(label)"):
        table.add_column(column, overflow="fold")
    for index, (text, result) in enumerate(zip(texts, classes, strict=True)):
        name = LABELS.get(result.label, str(result.label))
        table.add_row(str(index), text, name, f"{result.probabilities[result.label]:.3f}")
    console.print(table)
    if len(texts) > 1:
        for i in range(len(texts)):
            for j in range(i + 1, len(texts)):
                console.print(f"cosine similarity #{i} ~ #{j}: {similarity[i, j]:.4f}")
