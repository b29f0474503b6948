"""Opening a model export folder: verified files, one ONNX Runtime session per graph, the tokenizer.

Every byte handed to ONNX Runtime or the tokenizer comes from `ExportFolder.read`, which checked its size
and sha256 against the manifest. Sessions are created once here and shared by every call (ONNX Runtime's
`run` is thread-safe); the model classes keep no per-call state.

    load(folder)  ->  TextGenerator (gpt) | TextEncoder (bert) | TextToText (t5)
"""

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from onnxformer.runtime.decoding import CacheLayout
from onnxformer.runtime.errors import ManifestError, OnnxformerError
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.manifest import Manifest
from onnxformer.runtime.probe import ProbeResult, probe_export
from onnxformer.runtime.session import Device, Session, create_session
from onnxformer.runtime.tokenizer import TextTokenizer

if TYPE_CHECKING:
    from onnxformer.runtime.encoder import TextEncoder
    from onnxformer.runtime.generator import TextGenerator
    from onnxformer.runtime.seq2seq import TextToText

# Per family: the class that runs it, the graphs it needs; per graph, the inputs the runtime feeds.
CLASS_NAMES = {"gpt": "TextGenerator", "bert": "TextEncoder", "t5": "TextToText"}
ROLES = {"gpt": ("decoder",), "bert": ("encoder",), "t5": ("encoder", "decoder")}
INPUTS = {
    ("gpt", "decoder"): ("input_ids", "attention_mask"),
    ("bert", "encoder"): ("input_ids", "attention_mask", "token_type_ids"),
    ("t5", "encoder"): ("input_ids", "attention_mask"),
    ("t5", "decoder"): ("decoder_input_ids", "decoder_attention_mask", "encoder_attention_mask"),
}
SPECIAL_NAMES = ("pad", "bos", "eos", "unk", "mask", "sep", "cls")


@dataclass(frozen=True)
class ModelExport:
    """An opened, verified model export: what every model class is built on."""

    folder: ExportFolder
    tokenizer: TextTokenizer
    sessions: dict[str, Session]  # graph role ("decoder", "encoder") -> session
    cache: CacheLayout | None  # gpt and t5

    @property
    def manifest(self) -> Manifest:
        return self.folder.manifest

    @property
    def family(self) -> str:
        return str(self.manifest.family)

    @property
    def config(self) -> dict[str, Any]:
        return self.manifest.config

    @property
    def special(self) -> dict[str, int]:
        return self.manifest.special_tokens

    @property
    def provider(self) -> str:
        """The ONNX Runtime provider the graphs run on (e.g. "CPUExecutionProvider")."""
        return self.sessions[ROLES[self.family][0]].provider

    @property
    def provider_reason(self) -> str:
        return self.sessions[ROLES[self.family][0]].reason

    def require_family(self, family: str) -> None:
        if self.family != family:
            raise _wrong_family(self.folder.root, self.family, family)


def open_export(
    folder: str | os.PathLike,
    *,
    family: str | None = None,
    device: Device = "auto",
    threads: int | None = None,
    untrusted: bool = False,
) -> ModelExport:
    """Open and verify a model export; `family` refuses any other family (before building sessions).

    `untrusted=True` first does all of this, plus one tiny request, in a child process under time and
    memory limits (`onnxformer.runtime.probe`), and refuses the folder unless that went well, so a model
    that would crash or hang ONNX Runtime kills the child, not the caller."""
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
    actual = str(manifest.family)
    if family is not None and actual != family:
        raise _wrong_family(opened.root, actual, family)
    missing = [name for name in SPECIAL_NAMES if name not in manifest.special_tokens]
    if missing:
        raise ManifestError(f"manifest.json: special_tokens lacks {missing}; re-export the folder")
    tokenizer = TextTokenizer.from_bytes(
        opened.read(str(manifest.tokenizer)), manifest.special_tokens, name=str(manifest.tokenizer)
    )
    if tokenizer.vocab_size != manifest.config["vocab_size"]:
        raise ManifestError(
            f"{manifest.tokenizer} has {tokenizer.vocab_size} tokens but config.vocab_size is "
            f"{manifest.config['vocab_size']}: the tokenizer is not the model's; re-export the folder"
        )
    cache = None if actual == "bert" else CacheLayout.from_manifest(manifest.kv_cache, cross=actual == "t5")
    sessions = {}
    for role in ROLES[actual]:
        path = manifest.graphs[role]
        data = opened.read(path)
        try:
            session = create_session(data, device=device, threads=threads)
        except OnnxformerError:
            raise
        except Exception as error:  # ONNX Runtime's own load errors are untyped
            raise ManifestError(
                f"ONNX Runtime cannot load {path} ({str(error).splitlines()[0]}); the export needs opset "
                f"{manifest.opset}: upgrade onnxruntime or re-export with a lower opset"
            ) from None
        _check_inputs(session, path, _expected_inputs(actual, role, cache))
        sessions[role] = session
    return ModelExport(opened, tokenizer, sessions, cache)


def _probe(folder: str | os.PathLike) -> ProbeResult:
    result = probe_export(folder)
    if not result.ok:
        raise ManifestError(
            f"{folder} failed the untrusted probe, so it is not loaded: {result.detail}; "
            "do not run this export, or re-export it from a checkpoint you trust"
        )
    return result


def _wrong_family(root: os.PathLike, actual: str, wanted: str) -> ManifestError:
    return ManifestError(
        f"{root} holds a {actual} export, which {CLASS_NAMES[wanted]} cannot run; "
        f"load it with {CLASS_NAMES[actual]}.load or onnxformer.runtime.load"
    )


def _expected_inputs(family: str, role: str, cache: CacheLayout | None) -> list[str]:
    names = list(INPUTS[(family, role)])
    if cache is not None and role == "decoder":
        names += cache.cross_names() + cache.past_names()
    return names


def _check_inputs(session: Session, path: str, expected: list[str]) -> None:
    actual = {value.name for value in session.session.get_inputs()}
    missing = [name for name in expected if name not in actual]
    if missing:
        raise ManifestError(
            f"{path} lacks the inputs {missing} this runtime feeds (it has {sorted(actual)}); "
            "re-export the folder with this version of onnxformer"
        )


def load(
    folder: str | os.PathLike,
    *,
    device: Device = "auto",
    threads: int | None = None,
    untrusted: bool = False,
) -> "TextGenerator | TextEncoder | TextToText":
    """The model in an export folder, as the class for its family (see CLASS_NAMES).

    Pass `untrusted=True` for a folder from someone you do not trust (see `open_export`)."""
    # The classes are built on this module, so they are imported here rather than at the top.
    from onnxformer.runtime.encoder import TextEncoder
    from onnxformer.runtime.generator import TextGenerator
    from onnxformer.runtime.seq2seq import TextToText

    classes = {"gpt": TextGenerator, "bert": TextEncoder, "t5": TextToText}
    export = open_export(folder, device=device, threads=threads, untrusted=untrusted)
    return classes[export.family](export)


ModelT = TypeVar("ModelT", bound="ExportModel")


class ExportModel:
    """What the three runtime classes share: the opened export, its tokenizer and its sessions.

    Thread-safe: calls share only the ONNX Runtime sessions and the tokenizer, never per-call state.
    """

    family: str

    def __init__(self, export: ModelExport) -> None:
        export.require_family(self.family)
        self.export = export
        self.tokenizer = export.tokenizer
        self.max_len: int = export.config["max_len"]
        self.vocab_size: int = export.config["vocab_size"]

    @classmethod
    def load(
        cls: type[ModelT],
        folder: str | os.PathLike,
        *,
        device: Device = "auto",
        threads: int | None = None,
        untrusted: bool = False,
    ) -> ModelT:
        return cls(
            open_export(folder, family=cls.family, device=device, threads=threads, untrusted=untrusted)
        )

    @property
    def config(self) -> dict:
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
