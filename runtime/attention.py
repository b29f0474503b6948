"""Where a model looks: the attention weights of one sentence, from the export's `attentions.onnx`.

    attention_map("exported/gpt", "The cat sat on the mat.").row("sat")   # (keys,) averaged weights

Every model export holds `attentions.onnx`, the same model returning its softmax weights (graph role
"attentions"; manifest `io.attentions` names its inputs and its `self_attentions` / `cross_attentions`
outputs). The text is framed as the task's other graphs frame it (manifest `framing`): GPT <s> + tokens
(causal self-attention), BERT <cls> + tokens + <sep> (bidirectional), T5 tokens + </s> (encoder
self-attention). T5's `kind="cross"` decodes the model's own greedy output first, then feeds <start> +
that output: the query labelled "cat" is the decoder step that wrote "cat" (it read the token before), so
its row says which source tokens the model looked at while writing it; the last query is the step that
wrote </s>.

Shape legend: L layers, H heads, Q query tokens, K key tokens (for "self" K == Q; for "cross" K is the
source length).
"""

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from onnxformer.runtime.errors import InputError, ManifestError, OnnxformerError
from onnxformer.runtime.model import ExportModel, ModelExport, check_feedable, open_export, pick
from onnxformer.runtime.seq2seq import TextToText
from onnxformer.runtime.session import Device, create_session
from onnxformer.runtime.tokenizer import REPLACEMENT

Kind = Literal["self", "cross"]
KINDS: tuple[Kind, ...] = ("self", "cross")
PLOT_HINT = 'pip install "onnxformer[plot]"'
# The Software text of every heatmap PNG: how `onnxformer attention --out` knows a picture it may replace.
HEATMAP_SOFTWARE = "onnxformer attention heatmap"
# What the attentions graph may take (T5 self-attention feeds the decoder one token), and the `io`
# output key of each kind ("{i}" in its name is the layer; each holds (1, H, Q, K)).
FEEDABLE = ("input_ids", "attention_mask", "token_type_ids", "decoder_input_ids")
OUTPUT_KEYS: dict[Kind, str] = {"self": "self_attentions", "cross": "cross_attentions"}
# Softmax rows in fp32 sum to 1 within a few ulps per key; this also allows 64-key rows.
ROW_SUM_TOLERANCE = 1e-4
SPAN_LIMIT = 16  # most tokens one typed character may span (long emoji sequences)
_BYTES_SHOWN = re.compile(r"<((?:[0-9A-F]{2} )*[0-9A-F]{2})>")


def _shown_bytes(shown: str) -> bytes:
    """What a shown token stands for: the bytes of a "<F0 9F>" token, else its text's bytes."""
    match = _BYTES_SHOWN.fullmatch(shown)
    return bytes.fromhex(match.group(1)) if match else shown.encode("utf-8")


@dataclass(frozen=True, eq=False)
class AttentionMap:
    """The attention weights of one text: `weights[layer, head, query, key]`, each row a distribution."""

    family: str  # the architecture's name ("gpt", "bert", "t5", ...)
    kind: Kind
    text: str  # the input sentence
    query_tokens: list[str]  # readable tokens (leading space dropped, "<s>" for specials), length Q
    key_tokens: list[str]  # length K
    query_ids: list[int]
    key_ids: list[int]
    query_pieces: list[str]  # each token as it reads in the text (" sat"), for showing the sentence
    key_pieces: list[str]
    weights: np.ndarray  # (L, H, Q, K) float32
    special_ids: frozenset[int] = frozenset()  # <s>, </s>, <cls>, <sep>, ... (framing, not text)
    output_text: str | None = None  # T5 cross: the decoded output the queries belong to

    @property
    def layers(self) -> int:
        return int(self.weights.shape[0])

    @property
    def heads(self) -> int:
        return int(self.weights.shape[1])

    def query_index(self, token: str | int) -> int:
        """The query position of `token`: an index (negative counts from the end) or a token's text,
        matched exactly first, then ignoring case and surrounding spaces ("sat" matches " sat");
        the first occurrence wins."""
        count = len(self.query_tokens)
        if isinstance(token, bool) or not isinstance(token, str | int | np.integer):
            raise InputError(f"token must be a token's text or its index, got {type(token).__name__}")
        if not isinstance(token, str):
            if not -count <= token < count:
                raise InputError(
                    f"token index {token} is out of range: there are {count} query tokens "
                    f"(0..{count - 1}); choose one of {self._choices()}"
                )
            return int(token) % count
        exact = [i for i, shown in enumerate(self.query_tokens) if shown == token]
        loose = [
            i for i, shown in enumerate(self.query_tokens) if shown.casefold() == token.strip().casefold()
        ]
        if exact or loose:
            return (exact or loose)[0]
        spanning = self._spanning(token.strip())
        if spanning is not None:
            return spanning
        raise InputError(f"no query token {token!r} in {self.text!r}; choose one of {self._choices()}")

    def _spanning(self, text: str) -> int | None:
        """The first of the tokens that together spell `text` when one character is split over several
        byte tokens ("😀" = <F0 9F> <98> <80>), or None."""
        pieces = [_shown_bytes(shown) for shown in self.query_tokens]
        for start in range(len(pieces)):
            joined = b""
            for piece in pieces[start : start + SPAN_LIMIT]:
                joined += piece
                if joined.decode("utf-8", errors="replace").strip() == text:
                    return start
        return None

    def row(self, token: str | int, *, layer: int | None = None, head: int | None = None) -> np.ndarray:
        """The weights (K,) the query `token` gives every key; `layer` / `head` None averages that axis."""
        index = self.query_index(token)
        chosen = self.weights[_axis(layer, self.layers, "layer"), :, index]  # (L or 1, H, K)
        averaged: np.ndarray = chosen[:, _axis(head, self.heads, "head")].mean(axis=(0, 1))  # (K,)
        return averaged

    def _choices(self) -> str:
        return ", ".join(f"{i} {shown!r}" for i, shown in enumerate(self.query_tokens))


def _axis(value: int | None, size: int, name: str) -> slice:
    """The slice of one layer or head, or of all of them for None (the average)."""
    if value is None:
        return slice(None)
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InputError(f"{name} must be an integer (0..{size - 1}) or None for the average, got {value!r}")
    if not 0 <= value < size:
        raise InputError(
            f"{name} {value!r} is out of range: the model has {size} {name}s, numbered 0..{size - 1}; "
            f"pick one of them, or average over all {name}s"
        )
    return slice(int(value), int(value) + 1)


class AttentionReader:
    """An export plus its `attentions.onnx` session, for reading many texts' attention maps."""

    def __init__(self, source: ModelExport | ExportModel, *, device: Device = "auto") -> None:
        self._model = source if isinstance(source, ExportModel) else None
        self.export = source.export if isinstance(source, ExportModel) else source
        manifest = self.export.manifest
        path = manifest.graphs.get("attentions")
        if path is None:
            raise ManifestError(
                f"{self.export.folder.root} has no attentions graph (its graphs: {sorted(manifest.graphs)}); "
                "re-export the checkpoint with `onnxformer export` to get attentions.onnx"
            )
        graph = self.export.folder.graph(path)  # size and sha256 checked against the manifest
        try:
            self._session = create_session(graph, device=device)
        except OnnxformerError:
            raise
        except Exception as error:  # ONNX Runtime's own load errors are untyped
            raise ManifestError(
                f"ONNX Runtime cannot load {path} ({str(error).splitlines()[0]}); re-export the checkpoint"
            ) from None
        self._io = manifest.io["attentions"]
        check_feedable(self._io, path, FEEDABLE)
        inputs = {value.name for value in self._session.session.get_inputs()}
        missing = [name for name in self._io.inputs if name not in inputs]
        if missing:
            raise ManifestError(
                f"{path} lacks the inputs {missing} this runtime feeds (it has {sorted(inputs)}); "
                "re-export the checkpoint with this version of onnxformer"
            )
        self._outputs = [value.name for value in self._session.session.get_outputs()]

    @classmethod
    def load(cls, folder: str | os.PathLike[str], *, device: Device = "auto") -> "AttentionReader":
        return cls(open_export(folder, device=device), device=device)

    @property
    def provider(self) -> str:
        return self._session.provider

    def map(self, text: str, *, kind: Kind = "self") -> AttentionMap:
        """The attention map of `text`: self-attention, or for T5 `kind="cross"` the decoder's
        cross-attention over the source while it writes its greedy output."""
        family = self.export.family
        if kind not in KINDS:
            raise InputError(f"kind must be one of {KINDS}, got {kind!r}")
        if OUTPUT_KEYS[kind] not in self._io.outputs:
            raise InputError(
                f"cross-attention needs an encoder-decoder (t5) export; this is a {family} export, "
                "which has only self-attention"
            )
        if not isinstance(text, str) or not text.strip():
            raise InputError("give a non-empty sentence to look at, e.g. 'The cat sat on the mat.'")
        source = self._frame(text)
        # Encoder self-attention does not depend on the decoder: one token (the start) feeds it.
        decoder_input, queries, output_text = self._start(), source, None
        if kind == "cross":
            decoder_input, queries, output_text = self._decoder_output(source)
        weights = self._run(kind, source, decoder_input)
        return AttentionMap(
            family=family,
            kind=kind,
            text=text,
            query_tokens=[self._shown(t) for t in queries],
            key_tokens=[self._shown(t) for t in source],
            query_ids=list(queries),
            key_ids=list(source),
            query_pieces=self.export.tokenizer.pieces(queries),
            key_pieces=self.export.tokenizer.pieces(source),
            special_ids=self.export.tokenizer.special_ids,
            weights=weights,
            output_text=output_text,
        )

    def _frame(self, text: str) -> list[int]:
        framing = self.export.framing
        framed = framing.ids(self.export.tokenizer.encode(text), self.export.special)
        limit = self.export.shape.max_len
        if len(framed) > limit:
            raise InputError(
                f"the text is {len(framed)} tokens framed as {framing.describe()}, but the model reads at "
                f"most {limit}; shorten it"
            )
        return framed

    def _start(self) -> list[int]:
        """What the decoder reads for encoder self-attention: its start token (none without a decoder)."""
        if "decoder_input_ids" not in self._io.inputs:
            return []
        generation = self.export.manifest.generation
        if generation is None or generation.decoder_start_token_id is None:
            raise ManifestError(
                "manifest.json: the attentions graph takes decoder_input_ids but generation names no "
                "decoder_start_token_id; re-export the checkpoint"
            )
        return [generation.decoder_start_token_id]

    def _decoder_output(self, source: list[int]) -> tuple[list[int], list[int], str]:
        """The decoder input (<start> + the greedy output), the tokens its steps wrote (the output + </s>),
        and the output text. Step t reads input t and writes token t: the query label."""
        model = self._model if isinstance(self._model, TextToText) else TextToText(self.export)
        (result,) = model.generate_ids([source], temperature=0.0)
        stop = list(model.defaults.stop_tokens[:1]) if result.finish_reason == "stop" else []
        written = [*result.tokens, *stop][: model.max_len]
        return [model.start_token, *written[:-1]], written, self.export.tokenizer.decode(result.tokens)

    def _run(self, kind: Kind, source: list[int], decoder_input: list[int]) -> np.ndarray:
        ids = np.array([source], dtype=np.int64)  # (1, S)
        feeds = pick(
            self._io,
            input_ids=ids,
            attention_mask=np.ones_like(ids),
            token_type_ids=np.zeros_like(ids),
            decoder_input_ids=np.array([decoder_input], dtype=np.int64),  # (1, Q); 1 for "self"
        )
        pattern = self._io.outputs[OUTPUT_KEYS[kind]]
        names = layer_names(pattern, self._outputs)
        if not names:
            raise ManifestError(
                f"{self.export.manifest.graphs['attentions']} returns no {pattern} outputs (it has "
                f"{self._outputs}); re-export the checkpoint with this version of onnxformer"
            )
        outputs = self._session.run(feeds, names)  # L x (1, H, Q, K)
        weights = np.stack([value[0] for value in outputs]).astype(np.float32)  # (L, H, Q, K)
        worst = float(np.abs(weights.sum(axis=-1) - 1.0).max())
        if worst > ROW_SUM_TOLERANCE:
            raise ManifestError(
                f"{pattern} rows sum to 1 +- {worst:.1e}, not within {ROW_SUM_TOLERANCE}: the attentions "
                "graph does not return softmax weights; re-export the checkpoint"
            )
        return weights

    def _shown(self, token_id: int) -> str:
        """One token as readable text: the byte-level leading space dropped, blanks made visible, and a
        token that holds only part of a character (an emoji's bytes) shown as its bytes, "<F0 9F>"."""
        text = self.export.tokenizer.token_text(token_id)
        raw = self.export.tokenizer.token_bytes(token_id) if REPLACEMENT in text else None
        if raw:
            return "<" + " ".join(f"{byte:02X}" for byte in raw.removeprefix(b" ")) + ">"
        if text.strip():
            return text[1:] if text.startswith(" ") else text
        return text.replace(" ", "␣").replace("\n", "\\n").replace("\t", "\\t")


def layer_names(pattern: str, names: list[str]) -> list[str]:
    """The names among `names` that fit `pattern` ("attentions.{i}"), ordered by layer."""
    head, _, tail = pattern.partition("{i}")
    form = re.compile(re.escape(head) + r"(\d+)" + re.escape(tail))
    found = [(int(match.group(1)), name) for name in names if (match := form.fullmatch(name))]
    return [name for _, name in sorted(found)]


def attention_map(
    source: str | os.PathLike[str] | ModelExport | ExportModel,
    text: str,
    *,
    kind: Kind = "self",
    device: Device = "auto",
) -> AttentionMap:
    """The attention map of `text` for an export folder (or an opened export / loaded model)."""
    if isinstance(source, ModelExport | ExportModel):
        return AttentionReader(source, device=device).map(text, kind=kind)
    return AttentionReader.load(source, device=device).map(text, kind=kind)


def check_plotting() -> None:
    """Raise a typed error with the install hint when matplotlib (the `plot` extra) is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise OnnxformerError(f"PNG heatmaps need matplotlib; install it with {PLOT_HINT}") from None


def save_heatmaps(attention: AttentionMap, path: str | os.PathLike[str], *, title: str | None = None) -> Path:
    """A PNG grid of heatmaps, one per (layer, head): rows layers, columns heads, queries down, keys
    across. Written to a temporary file beside `path`, then renamed over it. The PNG's Software text is
    HEATMAP_SOFTWARE: the mark by which the CLI tells its own pictures from the user's."""
    check_plotting()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    if path.is_dir():
        raise InputError(f"cannot write {path}: it is a folder; give a file name such as attention.png")
    if not path.parent.is_dir():
        raise InputError(f"cannot write {path}: the folder {path.parent} does not exist")
    layers, heads, queries, keys = attention.weights.shape
    side = min(max(1.2 + 0.22 * max(queries, keys), 2.6), 8.0)  # inches per heatmap, room for labels
    figure = Figure(figsize=(heads * side + 1.2, layers * side + 0.8), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(layers, heads, squeeze=False)
    top = float(attention.weights.max())
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer, head]
            image = ax.imshow(attention.weights[layer, head], cmap="viridis", vmin=0.0, vmax=top)  # (Q, K)
            ax.set_title(f"layer {layer}, head {head}", fontsize=9)
            ax.set_xticks(range(keys), attention.key_tokens, rotation=90, fontsize=7)
            ax.set_yticks(range(queries), attention.query_tokens, fontsize=7)
    figure.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    figure.suptitle(title or _default_title(attention))
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise InputError(f"cannot write {path}: {error.strerror}; choose another path") from None
    try:
        with os.fdopen(descriptor, "wb") as handle:
            figure.savefig(handle, format="png", dpi=100, metadata={"Software": HEATMAP_SOFTWARE})
        os.chmod(temporary, 0o644)  # mkstemp makes it private; the picture should read like any file
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def _default_title(attention: AttentionMap) -> str:
    if attention.kind == "cross":
        return (
            f"t5 cross-attention: writing {attention.output_text!r} (rows: the token written) "
            f"from {attention.text!r} (columns)"
        )
    return f"{attention.family} self-attention: {attention.text!r} (rows: queries, columns: keys)"
