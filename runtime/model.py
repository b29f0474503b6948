"""Opening a model export folder: verified files, one ONNX Runtime session per graph, the tokenizer.

Every byte handed to ONNX Runtime or the tokenizer comes from `ExportFolder.read`, which checked its size
and sha256 against the manifest. Sessions are created once here and shared by every call (ONNX Runtime's
`run` is thread-safe); the model classes keep no per-call state.

This module sits below the three model classes (generator, encoder, seq2seq), which build on
`ExportModel`; `onnxformer.runtime.loader.load` sits above them and picks one by the manifest's `task`.
Nothing here knows a family: the graphs, their inputs, the cache and the framing all come from the
manifest (`onnxformer.runtime.manifest`).
"""

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np

from onnxformer.runtime.decoding import CacheLayout
from onnxformer.runtime.errors import InputError, ManifestError, OnnxformerError
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.manifest import Framing, GenerationDefaults, GraphIO, Manifest, ModelShape, TaskSpec
from onnxformer.runtime.probe import ProbeResult, probe_export
from onnxformer.runtime.session import Device, Session, check_threads, create_session
from onnxformer.runtime.tokenizer import TextTokenizer

# The special tokens every export names: the runtime pads batches. The others (bos, eos, unk, mask, sep,
# cls) are there when the tokenizer has them (an imported GPT-2 has no mask); framing and generation name
# only those present, which the manifest checks.
SPECIAL_NAMES = ("pad",)
# The class that runs each task, for messages (the classes themselves sit above this module).
CLASS_NAMES = {"generate": "TextGenerator", "encode": "TextEncoder", "seq2seq": "TextToText"}


@dataclass(frozen=True)
class ModelExport:
    """An opened, verified model export: what every model class is built on."""

    folder: ExportFolder
    tokenizer: TextTokenizer
    sessions: dict[str, Session]  # graph role ("decoder", "encoder") -> session
    cache: CacheLayout | None  # tasks that decode step by step

    @property
    def manifest(self) -> Manifest:
        return self.folder.manifest

    @property
    def family(self) -> str:
        """The architecture's name (informational; the runtime goes by `task`)."""
        return str(self.manifest.family)

    @property
    def task(self) -> str:
        return str(self.manifest.task)

    @property
    def spec(self) -> TaskSpec:
        return self.manifest.task_spec

    @property
    def shape(self) -> ModelShape:
        return self.manifest.shape

    @property
    def config(self) -> dict[str, Any]:
        return self.manifest.config

    @property
    def special(self) -> dict[str, int]:
        return self.manifest.special_tokens

    @property
    def framing(self) -> Framing:
        """How the task's text is framed (e.g. <s> + text for a GPT prompt)."""
        return self.manifest.text_framing()

    def io(self, role: str) -> GraphIO:
        return self.manifest.io[role]

    def cache_layout(self) -> CacheLayout:
        """The KV cache of a task that decodes step by step (the manifest's checks make it present)."""
        if self.cache is None:
            raise ManifestError(
                f"manifest.json: kv_cache is missing; the {self.task!r} task decodes with it; "
                "re-export the folder"
            )
        return self.cache

    def generation_defaults(self) -> GenerationDefaults:
        """The decoding defaults of a task that generates (the manifest's checks make them present)."""
        generation = self.manifest.generation
        if generation is None:
            raise ManifestError(
                f"manifest.json: generation is missing; the {self.task!r} task decodes with its defaults; "
                "re-export the folder"
            )
        return generation

    @property
    def provider(self) -> str:
        """The ONNX Runtime provider the graphs run on (e.g. "CPUExecutionProvider")."""
        return self.sessions[self.spec.roles[0]].provider

    @property
    def provider_reason(self) -> str:
        return self.sessions[self.spec.roles[0]].reason

    def require_task(self, task: str) -> None:
        if self.task != task:
            raise _wrong_task(self.folder.root, self.family, self.task, task)


def open_export(
    folder: str | os.PathLike[str],
    *,
    task: str | None = None,
    device: Device = "auto",
    threads: int | None = None,
    untrusted: bool = False,
) -> ModelExport:
    """Open and verify a model export; `task` refuses an export of any other task (before building
    sessions). `threads` is checked first (`check_threads`: None or 1 .. the CPUs this process may use).

    `untrusted=True` first does all of this, plus one tiny request, in a child process under time and
    memory limits (`onnxformer.runtime.probe`), and refuses the folder unless that went well, so a model
    that would crash or hang ONNX Runtime kills the child, not the caller."""
    threads = check_threads(threads)
    probed = _probe(folder) if untrusted else None
    opened = ExportFolder.open(folder)
    if probed is not None and opened.manifest_sha256 != probed.manifest_sha256:
        raise ManifestError(
            f"{opened.root}/manifest.json changed between the untrusted probe and loading; refusing it"
        )
    manifest = opened.manifest
    if manifest.export_kind != "model":
        raise ManifestError(
            f"{opened.root} is a {manifest.export_kind!r} export, not a model; export a trained "
            "checkpoint with `onnxformer export` to get one the runtime can run"
        )
    if task is not None and manifest.task != task:
        raise _wrong_task(opened.root, str(manifest.family), str(manifest.task), task)
    missing = [name for name in SPECIAL_NAMES if name not in manifest.special_tokens]
    if missing:
        raise ManifestError(f"manifest.json: special_tokens lacks {missing}; re-export the folder")
    tokenizer = TextTokenizer.from_bytes(
        opened.read(str(manifest.tokenizer)), manifest.special_tokens, name=str(manifest.tokenizer)
    )
    vocab_size = manifest.shape.vocab_size
    # A model's vocabulary may be padded past its tokenizer's (T5: 32,128 rows for 32,100 tokens), never
    # the other way round.
    if tokenizer.vocab_size > vocab_size:
        raise ManifestError(
            f"{manifest.tokenizer} has {tokenizer.vocab_size} tokens but config.vocab_size is only "
            f"{vocab_size}: the tokenizer is not the model's; re-export the folder"
        )
    spec = manifest.task_spec
    cache = CacheLayout(manifest.kv_cache) if spec.cached and manifest.kv_cache is not None else None
    sessions = {}
    for role in spec.roles:
        path = manifest.graphs[role]
        session = load_graph(opened, path, device=device, threads=threads)
        check_inputs(session, path, expected_inputs(manifest.io[role], role, cache))
        sessions[role] = session
    return ModelExport(opened, tokenizer, sessions, cache)


def load_graph(folder: ExportFolder, path: str, *, device: Device, threads: int | None = None) -> Session:
    """A session on one listed graph of `folder` (its bytes sha256-checked), ORT's load errors typed."""
    graph = folder.graph(path)  # bytes and any external weights, size and sha256 checked
    try:
        return create_session(graph, device=device, threads=threads)
    except OnnxformerError:
        raise
    except Exception as error:  # ONNX Runtime's own load errors are untyped
        raise ManifestError(
            f"ONNX Runtime cannot load {path} ({str(error).splitlines()[0]}); the export needs opset "
            f"{folder.manifest.opset}: upgrade onnxruntime or re-export with a lower opset"
        ) from None


def _probe(folder: str | os.PathLike[str]) -> ProbeResult:
    result = probe_export(folder)
    if not result.ok:
        raise ManifestError(
            f"{folder} failed the untrusted probe, so it is not loaded: {result.detail}; "
            "do not run this export, or re-export it from a checkpoint you trust"
        )
    return result


def _wrong_task(root: os.PathLike[str], family: str, actual: str, wanted: str) -> ManifestError:
    runs = CLASS_NAMES.get(actual, f"a runtime for the {actual!r} task")
    return ManifestError(
        f"{root} holds a {family} export (task {actual!r}), which {CLASS_NAMES.get(wanted, wanted)} cannot "
        f"run; load it with {runs}.load or onnxformer.runtime.load"
    )


def expected_inputs(io: GraphIO, role: str, cache: CacheLayout | None) -> list[str]:
    """The inputs the runtime feeds the graph of `role`: its io inputs, plus the cache for the decoder."""
    names = list(io.inputs)
    if cache is not None and role == "decoder":
        names += cache.cross_names() + cache.past_names()
    return names


def check_inputs(session: Session, path: str, expected: list[str]) -> None:
    actual = {value.name for value in session.session.get_inputs()}
    missing = [name for name in expected if name not in actual]
    if missing:
        raise ManifestError(
            f"{path} lacks the inputs {missing} this runtime feeds (it has {sorted(actual)}); "
            "re-export the folder with this version of onnxformer"
        )


def check_feedable(io: GraphIO, path: str, feedable: tuple[str, ...]) -> None:
    """Refuse a graph whose manifest `io` asks for inputs this runtime class has nothing to feed."""
    unknown = [name for name in io.inputs if name not in feedable]
    if unknown:
        raise ManifestError(
            f"manifest.json: io of {path} asks for the inputs {unknown}, which this task does not feed "
            f"(it feeds {list(feedable)}); re-export the folder with this version of onnxformer"
        )


def pick(io: GraphIO, **available: np.ndarray) -> dict[str, np.ndarray]:
    """The feeds of one graph: of the values the caller has (input name -> array), those its `io` lists."""
    return {name: available[name] for name in io.inputs}


def text_list(texts: object, *, what: str) -> Sequence[Any]:
    """`texts` checked to be a list of at least one item (a str is not such a list); the items are the
    caller's to check (`ExportModel.frame` refuses one that is not a str)."""
    if isinstance(texts, str | bytes) or not isinstance(texts, Sequence):
        raise InputError(f"{what} must be a str or a list of str", field="texts")
    if len(texts) == 0:
        raise InputError(f"give at least one {what}", field="texts")
    return texts


ModelT = TypeVar("ModelT", bound="ExportModel")


class ExportModel:
    """What the three runtime classes share: the opened export, its tokenizer and its sessions.

    Thread-safe: calls share only the ONNX Runtime sessions and the tokenizer, never per-call state.
    """

    task: ClassVar[str]  # the manifest task this class runs
    feeds: ClassVar[dict[str, tuple[str, ...]]]  # per graph role, the inputs this class can feed it

    def __init__(self, export: ModelExport) -> None:
        export.require_task(self.task)
        for role in export.spec.roles:
            check_feedable(export.io(role), export.manifest.graphs[role], self.feeds[role])
        self.export = export
        self.tokenizer = export.tokenizer
        self.max_len: int = export.shape.max_len
        self.vocab_size: int = export.shape.vocab_size
        self.framing: Framing = export.framing

    @classmethod
    def load(
        cls: type[ModelT],
        folder: str | os.PathLike[str],
        *,
        device: Device = "auto",
        threads: int | None = None,
        untrusted: bool = False,
    ) -> ModelT:
        return cls(open_export(folder, task=cls.task, device=device, threads=threads, untrusted=untrusted))

    @property
    def family(self) -> str:
        """The architecture's name from the manifest ("gpt", "bert", "t5", ...)."""
        return self.export.family

    @property
    def config(self) -> dict[str, Any]:
        """The model config from the manifest (vocab_size, d_model, n_layers, n_heads, max_len, ...)."""
        return self.export.config

    @property
    def provider(self) -> str:
        """The ONNX Runtime provider the sessions run on."""
        return self.export.provider

    @property
    def provider_reason(self) -> str:
        """Why that provider (for example why CUDA was not used)."""
        return self.export.provider_reason

    def frame(
        self, text: str, *, what: str = "text", index: int | None = None, limit: int | None = None
    ) -> list[int]:
        """The ids the model reads for `text`: the manifest's framing around its tokens (e.g. <cls> + text
        + <sep>), refused when longer than `limit` ids (default: the model's context)."""
        limit = self.max_len if limit is None else limit
        at = what if index is None else f"{what} {index}"
        field = "texts" if index is None else f"texts[{index}]"
        if not isinstance(text, str):
            raise InputError(f"{at} must be a str, got {type(text).__name__}", field=field)
        row = self.framing.ids(self.tokenizer.encode(text, limit=limit), self.tokenizer.special_tokens)
        if len(row) > limit:
            raise InputError(
                f"{at} is {len(row)} tokens framed as {self.framing.describe()}, but the model reads at most "
                f"{limit}; shorten the {what}",
                field=field,
            )
        return row

    def frame_all(self, texts: object, *, what: str = "text", limit: int | None = None) -> list[list[int]]:
        """`frame` for each of a list of texts (at least one)."""
        return [
            self.frame(text, what=what, index=index, limit=limit)
            for index, text in enumerate(text_list(texts, what=what))
        ]

    def warm_up(self) -> None:
        """One tiny request through every graph the task runs (the untrusted probe's last step)."""
        raise NotImplementedError
