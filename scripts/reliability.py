"""The figures of docs/reliability.md, measured: run this to check them or to refresh the page.

    .venv/bin/python scripts/reliability.py                # everything (about 6 minutes on 2 cores)
    .venv/bin/python scripts/reliability.py --quick        # fewer cases of each kind, no soak
    .venv/bin/python scripts/reliability.py --write docs/reliability.md

Sections (each prints its figures as it finishes):

1. hostile folders: manifest paths that leave the folder, links, special files and external data in each
   reference export, tried through `ExportFolder.verify`, `load` and `check_export` (what `onnxformer
   verify` runs), with a canary file outside the folder that must never be read;
2. corruptions: a flipped byte and a truncation of every file of each reference export, which
   `ExportFolder.verify` must detect;
3. mutated models: reference graphs mutated (then re-hashed into the manifest, as a hostile author would)
   and probed with `probe_export`: what the probe saw, and how many times the calling process died;
4. fuzzed inputs: the property tests of tests/runtime/test_fuzz_inputs.py with many more examples;
5. kills: writers of exports and checkpoints killed with SIGKILL (scripts/kill_writes.py);
6. threads: one model shared by 16 threads, 200 requests each, against sequential results;
7. soak: scripts/soak.py (20,000 encoder requests, 2,000 generations), RSS growth after warm-up.

Needs the full environment (.venv): the checkpoint kills train two tiny checkpoints with torch.
"""

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from onnxformer.runtime import load, protobuf
from onnxformer.runtime.check import check_export
from onnxformer.runtime.errors import ManifestError, OnnxformerError
from onnxformer.runtime.folder import ExportFolder, sha256_bytes
from onnxformer.runtime.probe import probe_export

ROOT = Path(__file__).resolve().parents[1]
EXPORTED = ROOT / "exported"
FAMILIES = ("gpt", "bert", "t5")
SECRET = b"reliability-canary-5be0c3"
SENTENCE = "the cat sat on a mat while the small dog chased the red ball under an old table"
sys.path.insert(0, str(ROOT / "scripts"))

import kill_writes  # noqa: E402  (a sibling script)


def say(text: str) -> None:
    print(text, flush=True)


# 1. Hostile folders.


class Canary:
    """A file outside the folder that stands for a secret. Linux (relatime) refreshes a file's access
    time on a read when the access time is older than the modification time, so the canary starts with
    an old access time; any read of it would show."""

    def __init__(self, path: Path, content: bytes = SECRET) -> None:
        self.path = path
        path.write_bytes(content)
        os.utime(path, (1_000_000, 2_000_000))

    def read_since(self) -> bool:
        return self.path.stat().st_atime != 1_000_000


def atime_records_reads(work: Path) -> bool:
    control = Canary(work / "control")
    control.path.read_bytes()
    return control.read_since()


# Manifest paths to refuse: the cases every host shares (tests/path_cases.json, also read by pytest and
# the Node host's tests).
HOSTILE_PATHS = [
    case["path"] for case in json.loads((ROOT / "tests" / "path_cases.json").read_text())["refuse"]
]


def _external(location: str) -> bytes:
    entry = protobuf.field(1, b"location") + protobuf.field(2, location.encode())
    return (
        protobuf.field(1, 4)
        + protobuf.field(2, 1)
        + protobuf.field(8, b"w")
        + protobuf.field(13, entry)
        + protobuf.field(14, 1)
    )


def _in(*numbers: int) -> Callable[[bytes], bytes]:
    """Nest a tensor in messages: _in(7, 5)(tensor) is ModelProto{graph: GraphProto{initializer}}."""

    def wrap(tensor: bytes) -> bytes:
        for number in reversed(numbers):
            tensor = protobuf.field(number, tensor)
        return tensor

    return wrap


# Where a tensor with external data can sit, and where it points (the canary is an absolute path).
EXTERNAL_DATA = {
    "initializer -> canary (absolute)": (_in(7, 5), None),
    "initializer -> ../canary": (_in(7, 5), "../canary"),
    "initializer -> canary.bin in the working folder": (_in(7, 5), "canary.bin"),
    "initializer -> */_ORT_MEM_ADDR_/*": (_in(7, 5), "*/_ORT_MEM_ADDR_/*"),
    "Constant attribute -> canary": (_in(7, 1, 5, 5), None),
    "If subgraph -> canary": (_in(7, 1, 5, 6, 5), None),
    "function body -> canary": (_in(25, 7, 5, 5), None),
}


def _listed(folder: Path, path: str, data: bytes) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"].append(
        {"path": path, "sha256": sha256_bytes(data), "size": len(data), "kind": "extra", "options": {},
         "inputs": [], "outputs": []}
    )  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _rehash(folder: Path, path: str) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    data = (folder / path).read_bytes()
    for entry in manifest["files"]:
        if entry["path"] == path:
            entry.update(sha256=sha256_bytes(data), size=len(data))
    (folder / "manifest.json").write_text(json.dumps(manifest))


def link_cases(family: str) -> Iterator[tuple[str, Callable[[Path, Path, Canary], None], bool]]:
    """(name, set-up, whether `load` reads the file) for each case on one export: links and special files
    in place of listed files, manifest paths that leave the folder, graphs with external data."""
    manifest = ExportFolder.open(EXPORTED / family).manifest
    graph = manifest.graphs[manifest.task_spec.roles[0]]  # a graph `load` reads
    golden = next((e.path for e in manifest.files if e.path.startswith("goldens/")), None)
    targets = [manifest.tokenizer, graph] + ([golden] if golden else [])

    Make = Callable[[Path, Path, Canary, bytes], object]

    def replace(target: str, make: Make):
        def setup(folder: Path, work: Path, canary: Canary) -> None:
            path = folder / target
            original = path.read_bytes()
            path.unlink()
            make(path, work, canary, original)

        return setup

    def hard_link(path: Path, work: Path, canary: Canary, original: bytes) -> None:
        # The canary holds the very bytes the manifest expects: only its link count gives it away.
        canary.path.write_bytes(original)
        os.utime(canary.path, (1_000_000, 2_000_000))
        os.link(canary.path, path)

    makers: dict[str, Make] = {
        "symlink to the canary (absolute)": lambda p, w, c, o: os.symlink(c.path, p),
        "symlink to the canary (relative)": lambda p, w, c, o: os.symlink(
            os.path.relpath(c.path, p.parent), p
        ),
        "dangling symlink": lambda p, w, c, o: os.symlink(w / "nothing-here", p),
        "symlink loop": lambda p, w, c, o: os.symlink(p.name, p),
        "symlink to /dev/zero": lambda p, w, c, o: os.symlink("/dev/zero", p),
        "symlink to /proc/self/mem": lambda p, w, c, o: os.symlink("/proc/self/mem", p),
        "hard link to the canary": hard_link,
        "FIFO": lambda p, w, c, o: os.mkfifo(p),
        "unix socket": lambda p, w, c, o: socket.socket(socket.AF_UNIX).bind(str(p)),
        "character device (/dev/zero)": lambda p, w, c, o: os.mknod(
            p, stat.S_IFCHR | 0o600, os.makedev(1, 5)
        ),
        "folder": lambda p, w, c, o: p.mkdir(),
        "sparse 1 TiB file": lambda p, w, c, o: p.write_bytes(b"") or os.truncate(p, 1 << 40),
    }
    for target in targets:
        kind = "tokenizer" if target == manifest.tokenizer else "graph" if target == graph else "golden"
        for name, make in makers.items():
            yield f"{kind}: {name}", replace(target, make), kind != "golden"
    for name in ("symlink to the canary (absolute)", "FIFO", "hard link to the canary", "sparse 1 TiB file"):
        yield f"manifest.json: {name}", replace("manifest.json", makers[name]), True

    def parent_link(folder: Path, work: Path, canary: Canary) -> None:
        outside = work / f"outside-{random.random()}"
        first = next(p for p in (folder / target).parents if p.parent == folder)
        shutil.move(first, outside)
        os.symlink(outside, first)

    for target in targets:
        if "/" in target:
            yield f"{target.split('/')[0]}/ folder: symlink to a copy outside", parent_link, False
    for path in HOSTILE_PATHS:
        yield (
            f"manifest path {path!r}",
            lambda folder, work, canary, path=path: _listed(folder, path, SECRET),
            True,
        )
    for name, (wrap, location) in EXTERNAL_DATA.items():

        def external(folder: Path, work: Path, canary: Canary, wrap=wrap, location=location) -> None:
            model = folder / graph
            model.write_bytes(model.read_bytes() + wrap(_external(location or str(canary.path))))
            _rehash(folder, graph)

        yield f"external data: {name}", external, True


ENTRY_POINTS: dict[str, Callable[[Path], object]] = {
    "ExportFolder.verify": lambda folder: ExportFolder.open(folder).verify(),
    "load": lambda folder: load(folder, device="cpu"),
    "check_export (onnxformer verify)": lambda folder: _raise_first(check_export(ExportFolder.open(folder))),
}


def _raise_first(results) -> None:
    for result in results:
        if not result.ok:
            raise ManifestError(result.problem)


@contextlib.contextmanager
def alarm(seconds: int):
    def hung(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def hostile_folders(families: tuple[str, ...]) -> dict:
    tried = refused = hangs = leaks = 0
    other: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        work = Path(tmp)
        if not atime_records_reads(work):
            raise SystemExit("this file system does not record reads (noatime): the canary cannot tell")
        canary = Canary(work / "canary")
        (work / "canary.bin").write_bytes(SECRET)  # for external data relative to the working folder
        cwd = os.getcwd()
        os.chdir(work)
        try:
            for family in families:
                for name, setup, loaded in link_cases(family):
                    folder = work / "case" / family
                    shutil.rmtree(folder.parent, ignore_errors=True)
                    shutil.copytree(EXPORTED / family, folder)
                    canary = Canary(work / "canary")
                    setup(folder, work, canary)
                    for entry, call in ENTRY_POINTS.items():
                        if entry == "load" and not loaded:  # `load` never reads this file
                            continue
                        tried += 1
                        try:
                            with alarm(20):
                                call(folder)
                        except OnnxformerError as error:
                            refused += 1
                            leaks += SECRET.decode() in str(error)
                        except TimeoutError:
                            hangs += 1
                            other.append(f"{family} {name} via {entry}: hung")
                        except Exception as error:
                            other.append(f"{family} {name} via {entry}: {type(error).__name__}: {error}")
                        else:
                            other.append(f"{family} {name} via {entry}: accepted")
                    if canary.read_since():
                        other.append(f"{family} {name}: the canary was read")
                        leaks += 1
        finally:
            os.chdir(cwd)
    return {"tried": tried, "refused": refused, "hangs": hangs, "canary_reads_or_leaks": leaks,
            "problems": other[:20]}  # fmt: skip


# 2. Corruptions.


def corruptions(families: tuple[str, ...], *, bit_flips: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    tried = detected = 0
    missed: list[str] = []
    manifest_bits = {"tried": 0, "detected": 0, "detected_by_cli_verify": 0, "changed_only": Counter()}
    with tempfile.TemporaryDirectory(prefix="corrupt-") as tmp:
        for family in families:
            folder = Path(tmp) / family
            shutil.copytree(EXPORTED / family, folder)
            paths = [entry.path for entry in ExportFolder.open(folder).manifest.files] + ["manifest.json"]
            for path in paths:
                original = (folder / path).read_bytes()
                middle = len(original) // 2
                flipped = bytearray(original)
                flipped[middle] ^= 0xFF
                for kind, data in (
                    ("flipped byte", bytes(flipped)),
                    ("truncated to half", original[:middle]),
                ):
                    (folder / path).write_bytes(data)
                    tried += 1
                    try:
                        ExportFolder.open(folder).verify()
                    except ManifestError:
                        detected += 1
                    else:
                        missed.append(f"{family}/{path}: {kind}")
                    (folder / path).write_bytes(original)
            # Single-bit flips in the manifest: the JSON may stay valid; say what they changed.
            original = (folder / "manifest.json").read_bytes()
            for _ in range(bit_flips):
                position = rng.randrange(len(original))
                data = bytearray(original)
                data[position] ^= 1 << rng.randrange(8)
                (folder / "manifest.json").write_bytes(bytes(data))
                manifest_bits["tried"] += 1
                try:
                    ExportFolder.open(folder).verify()
                except ManifestError:
                    manifest_bits["detected"] += 1
                    manifest_bits["detected_by_cli_verify"] += 1
                else:
                    if not _cli_verify_passes(folder):
                        manifest_bits["detected_by_cli_verify"] += 1
                    else:
                        manifest_bits["changed_only"][_changed_key(original, position)] += 1
                (folder / "manifest.json").write_bytes(original)
    return {"tried": tried, "detected": detected, "missed": missed[:20], "manifest_bit_flips": manifest_bits}


def _cli_verify_passes(folder: Path) -> bool:
    """What `onnxformer verify` checks: files, graphs' inputs and outputs, the golden test data."""
    from onnxformer.runtime.goldens import run_goldens

    try:
        export = ExportFolder.open(folder)
        if not all(result.ok for result in check_export(export)):
            return False
        return all(golden.ok for golden in run_goldens(export))
    except OnnxformerError:
        return False


def _changed_key(manifest: bytes, position: int) -> str:
    """The JSON key whose value holds `position` (what an undetected bit flip changed)."""
    keys = list(re.finditer(rb'"([A-Za-z_][A-Za-z0-9_.]*)":', manifest[:position]))
    return keys[-1].group(1).decode() if keys else "?"


# 3. Mutated models, probed.


# Where to mutate a ModelProto so that it stays valid protobuf (then ONNX Runtime, not our scan, has to
# cope): path of field numbers from the ModelProto (onnx.proto) -> what the field holds.
_MESSAGES = {
    (7,): "graph", (8,): "opset",
    (7, 1): "node", (7, 5): "tensor", (7, 11): "value", (7, 12): "value", (7, 13): "value",
    (7, 1, 5): "attribute", (7, 1, 5, 5): "tensor",
    (7, 11, 2): "type", (7, 12, 2): "type", (7, 13, 2): "type",
    (7, 11, 2, 1): "tensor_type", (7, 12, 2, 1): "tensor_type", (7, 13, 2, 1): "tensor_type",
    (7, 11, 2, 1, 2): "shape", (7, 12, 2, 1, 2): "shape", (7, 13, 2, 1, 2): "shape",
    (7, 11, 2, 1, 2, 1): "dim", (7, 12, 2, 1, 2, 1): "dim", (7, 13, 2, 1, 2, 1): "dim",
}  # fmt: skip
_SITES = {  # (message, field) -> kind of site
    ("opset", 2): "varint", ("node", 1): "name", ("node", 2): "name", ("node", 4): "op_type",
    ("attribute", 3): "varint", ("attribute", 8): "varint", ("attribute", 20): "varint",
    ("tensor", 1): "varint", ("tensor", 2): "varint", ("tensor", 8): "name", ("value", 1): "name",
    ("tensor_type", 1): "varint", ("dim", 1): "varint",
}  # fmt: skip
_OP_NAMES = (
    "Add Sub Mul Div Pow Exp Log Abs Neg Max Min Sum Erf Cos Sin Tanh Relu Sqrt Cast Tile Gemm Size Shape "
    "Slice Where Equal Range Split Gather MatMul Concat Expand Reshape Softmax Squeeze Unsqueeze Transpose "
    "ReduceMean ConstantOfShape LayerNormalization Trilu Less"
)
OP_TYPES = _OP_NAMES.split(" ")


def mutation_sites(data: bytes) -> list[tuple[str, int, int]]:
    """(kind, start, end) of every varint, tensor name and op type in the graph's structure."""
    sites: list[tuple[str, int, int]] = []

    def walk(start: int, end: int, path: tuple[int, ...]) -> None:
        message = _MESSAGES.get(path, "model" if not path else None)
        position = start
        while position < end:
            key, position = protobuf.varint(data, position)
            number, wire = key >> 3, key & 7
            kind = _SITES.get((message, number))
            if wire == 0:
                before = position
                _, position = protobuf.varint(data, position)
                if kind == "varint":
                    sites.append((kind, before, position))
            elif wire == 2:
                size, position = protobuf.varint(data, position)
                if (*path, number) in _MESSAGES:
                    walk(position, position + size, (*path, number))
                elif kind in ("name", "op_type"):
                    sites.append((kind, position, position + size))
                position += size
            elif wire in (1, 5):
                position += 8 if wire == 1 else 4
            else:
                return

    walk(0, len(data), ())
    return sites


def _same_length_varint(length: int, rng: random.Random) -> bytes:
    """A varint of exactly `length` bytes: a random value, or the smallest or largest one of that size."""
    low, high = (0 if length == 1 else 1 << 7 * (length - 1)), (1 << 7 * length) - 1
    value = rng.choice([low, high, rng.randint(low, high), 0 if length == 1 else low])
    out = bytearray()
    for index in range(length):
        byte = (value >> 7 * index) & 0x7F
        out.append(byte | (0x80 if index < length - 1 else 0))
    return bytes(out)


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One mutant of a serialized model, and what was done. Most mutants stay valid protobuf: a number
    (dimension, attribute, data type, opset) or a name or op type is replaced by one of the same size."""
    out = bytearray(data)
    sites = mutation_sites(data)
    names = sorted({bytes(data[a:b]) for kind, a, b in sites if kind == "name"})
    how = rng.choice(["number", "number", "name", "op_type", "several", "truncate"])
    if how == "truncate":
        return how, data[: rng.randrange(len(data))]
    for _ in range(rng.randint(2, 6) if how == "several" else 1):
        kind = (
            rng.choice(["varint", "name", "op_type"]) if how == "several" else how.replace("number", "varint")
        )
        kind_sites = [site for site in sites if site[0] == kind]
        if not kind_sites:
            continue
        _, start, end = rng.choice(kind_sites)
        if kind == "varint":
            out[start:end] = _same_length_varint(end - start, rng)
        elif kind == "name":
            same = [name for name in names if len(name) == end - start] or [
                bytes(rng.randrange(97, 123) for _ in range(end - start))
            ]
            out[start:end] = rng.choice(same)
        else:
            same = [op.encode() for op in OP_TYPES if len(op) == end - start]
            if same:
                out[start:end] = rng.choice(same)
    return how, bytes(out)


def mutated_models(families: tuple[str, ...], per_family: int, *, seed: int = 0) -> dict:
    rng = random.Random(seed)
    statuses: Counter = Counter()
    stages: Counter = Counter()
    by_mutation: dict[str, Counter] = {}
    examples: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        for family in families:
            manifest = ExportFolder.open(EXPORTED / family).manifest
            graphs = list(manifest.graphs.values())
            for index in range(per_family):
                folder = Path(tmp) / f"{family}-{index}"
                shutil.copytree(EXPORTED / family, folder)
                graph = rng.choice(graphs)
                original = (folder / graph).read_bytes()
                how, data = mutate(original, rng)
                (folder / graph).write_bytes(data)
                _rehash(folder, graph)
                result = probe_export(folder, timeout_s=60, memory_mb=2048)
                outcome = _probe_outcome(result)
                statuses[result.status] += 1
                stages[outcome] += 1
                by_mutation.setdefault(how, Counter())[result.status] += 1
                examples.setdefault(outcome, f"{family} {graph} ({how}): {result.detail[:150]}")
                shutil.rmtree(folder)
    return {
        "probed": sum(statuses.values()),
        "statuses": dict(statuses),
        "stages": dict(stages),
        "by_mutation": {k: dict(v) for k, v in by_mutation.items()},
        "examples": examples,
        "caller_crashes": 0,  # this process is still here to count
    }


def _probe_outcome(result) -> str:
    """Where the probe of a mutant stopped, in words."""
    if result.status != "error":
        return {"ok": "loaded, verified and ran: the mutation kept a working model"}.get(
            result.status, f"{result.status} (the caller would have died)"
        )
    if "not a valid ONNX model" in result.detail:
        return "refused by the runtime's protobuf scan before ONNX Runtime saw it"
    if any(step.startswith("checked every file") for step in result.steps):
        return "loaded, then the golden test data or the tiny request failed with an error"
    return "refused by ONNX Runtime when creating the session"


# 4. Fuzzed inputs.


def fuzzed_inputs(examples: int) -> dict:
    env = {**os.environ, "ONNXFORMER_FUZZ_EXAMPLES": str(examples), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-show-statistics",
        "-o", "timeout=3000", str(ROOT / "tests" / "runtime" / "test_fuzz_inputs.py"),
    ]  # fmt: skip
    start = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False, cwd=ROOT)
    text = result.stdout + result.stderr
    cases = sum(int(n) for n in re.findall(r"(\d+) passing, \d+ failing", text))
    failing = sum(int(n) for n in re.findall(r"\d+ passing, (\d+) failing", text))
    ran = re.findall(r"([\d.]+)%, ran", text)
    return {
        "cases": cases,
        "failing_cases": failing,
        "tests_failed": len(re.findall(r"^FAILED ", text, re.M)),
        "timeouts": text.count("Timeout"),
        "ran_share": [float(x) for x in ran],
        "seconds": round(time.monotonic() - start, 1),
        "summary": text.strip().splitlines()[-1] if text.strip() else "",
    }


# 5. Kills.


def kills(random_kills: int) -> dict:
    export = kill_writes.main([
        "export", str(EXPORTED / "bert"), str(EXPORTED / "gpt"), "--random", str(random_kills), "--points",
    ])  # fmt: skip
    with_goldens = kill_writes.main([
        "export", str(EXPORTED / "t5"), str(EXPORTED / "gpt"), "--random", str(random_kills), "--goldens",
        "--max-delay", "1.0",
    ])  # fmt: skip
    from onnxformer.builder.training import TrainOptions, train

    tiny = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}
    with tempfile.TemporaryDirectory(prefix="checkpoints-") as tmp:
        versions = []
        for steps in (2, 3):
            options = TrainOptions(
                "gpt", steps=steps, batch_size=8, eval_every=steps, quality_samples=4, model_overrides=tiny
            )
            versions.append(str(train(Path(tmp) / str(steps), options).out))
        checkpoint = kill_writes.main(["checkpoint", *versions, "--random", str(random_kills), "--points"])
    reports = [export, with_goldens, checkpoint]
    return {
        "kills": sum(r["kills"] for r in reports),
        "random": sum(r["random_kills"] for r in reports),
        "system_call_points": sum(r["point_kills"] for r in reports),
        "corrupt": sum(r["corrupt"] for r in reports),
        "leftover_folders": sum(r["leftover_folders"] for r in reports),
        "reports": reports,
    }


# 6. Threads.


def threads(count: int = 16, requests: int = 200) -> dict:
    rng = np.random.default_rng(0)
    words = SENTENCE.split(" ")
    texts = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(1, 41, size=24)]
    bert, gpt, t5 = (load(EXPORTED / family, device="cpu") for family in ("bert", "gpt", "t5"))
    workloads = {
        "bert embed": (bert.embed, [texts[i : i + 1 + i % 3] for i in range(24)], np.array_equal),
        "gpt generate": (
            lambda r: gpt.generate(r[0], max_new_tokens=r[1], temperature=r[2], seed=7),
            [(texts[i][:80], 1 + i % 6, (0.0, 1.0)[i % 2]) for i in range(24)],
            lambda a, b: a == b,
        ),
        "t5 generate": (
            lambda r: t5.generate(r, max_new_tokens=6),
            [texts[i][:80] for i in range(12)],
            lambda a, b: a == b,
        ),
    }
    report = {}
    for name, (call, inputs, same) in workloads.items():
        expected = [call(item) for item in inputs]
        start = time.monotonic()
        mismatches = _hammer(call, inputs, expected, same, count=count, requests=requests)
        report[name] = {"requests": count * requests, "mismatches": mismatches,
                        "seconds": round(time.monotonic() - start, 1)}  # fmt: skip
    return report


def _hammer(call, inputs: list, expected: list, same, *, count: int, requests: int) -> int:
    """Requests from `count` threads at once, each in its own random order; the number of wrong results."""
    barrier = threading.Barrier(count)
    wrong = [0] * count

    def worker(thread: int) -> None:
        order = np.random.default_rng(thread).integers(0, len(inputs), size=requests)
        barrier.wait()
        for index in order.tolist():
            try:
                ok = same(call(inputs[index]), expected[index])
            except Exception:
                ok = False
            wrong[thread] += not ok

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(count)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return sum(wrong)


# 7. Soak.


def soak() -> dict:
    command = [sys.executable, str(ROOT / "scripts" / "soak.py"), "--json"]
    result = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(result.stdout.splitlines()[-1])


# The page.


def page(r: dict) -> str:
    host = r["host"]
    ort_version = r.get("onnxruntime", "?")
    harmful = sum(n for status, n in r["mutants"]["statuses"].items() if status not in ("ok", "error"))
    harm_sentence = (
        f"None of them crashed ONNX Runtime {ort_version}, hung or exhausted memory."
        if not harmful
        else f"{harmful} of them crashed, hung or exhausted ONNX Runtime {ort_version} in the probe, which "
        "would have taken the caller down; the probe contained them."
    )
    h, c, m, f, k, t = r["hostile"], r["corruptions"], r["mutants"], r["fuzz"], r["kills"], r["threads"]
    bits = c["manifest_bit_flips"]
    ranked = sorted(bits["changed_only"].items(), key=lambda item: -item[1])
    changed = ", ".join(f"{key} ({n})" for key, n in ranked) or "none"
    statuses = ", ".join(f"{status} {n}" for status, n in sorted(m["statuses"].items()))
    stages = "\n".join(
        f"- {n} {stage}; for example {m['examples'][stage]}" for stage, n in sorted(m["stages"].items())
    )
    rows = [
        ("path traversal, links, special files and external data, through verify, load and check_export",
         h["tried"], f"**{h['refused']} refused**, {h['hangs']} hangs, canary read or leaked "
         f"{h['canary_reads_or_leaks']} times"),
        ("a flipped byte and a truncation of every file (manifest included) of the three reference exports",
         c["tried"], f"**{c['detected']} detected** by `ExportFolder.verify`"),
        ("single-bit flips in manifest.json (it has no checksum of its own)", bits["tried"],
         f"{bits['detected']} detected by `ExportFolder.verify`, {bits['detected_by_cli_verify']} by "
         f"`onnxformer verify` (graph inputs and outputs, goldens); the rest changed one value that "
         f"nothing checks: {changed}"),
        ("mutated ONNX graphs (re-hashed, as a hostile author would) probed with `--untrusted`", m["probed"],
         f"{statuses}; **caller crashes {m['caller_crashes']}**"),
        ("fuzzed inputs to the runtime API and CLI (hypothesis)", f"{f['cases']} cases",
         f"**{f['failing_cases']} crashes**, {f['timeouts']} hangs ({f['summary']})"),
        ("SIGKILL during export and checkpoint writes: at random moments and before every system call",
         f"{k['kills']} ({k['random']} random)",
         f"**{k['corrupt']} corrupt artifacts**: the target is always the previous or the new version"),
    ]  # fmt: skip
    for name, v in t.items():
        outcome = f"**{v['mismatches']} mismatches** with the sequential results ({v['seconds']} s)"
        rows.append((f"{name}: one model shared by 16 threads x 200 requests", v["requests"], outcome))
    if r.get("soak"):
        so = r["soak"]
        rows.append((f"soak: {so['encoder_requests']} encoder requests and {so['generations']} generations",
                     so["encoder_requests"] + so["generations"],
                     f"RSS {so['rss_after_warmup_mb']} MiB after warm-up, {so['rss_end_mb']} MiB at the end: "
                     f"**growth {so['growth_after_warmup_mb']} MiB** (aim < 20)"))  # fmt: skip
    table = "\n".join(f"| {what} | {count} | {outcome} |" for what, count, outcome in rows)
    return f"""# Reliability and security

What onnxformer does with hostile export folders, bad input, kills and load, and the figures that show
it. Every figure on this page comes from `scripts/reliability.py`; rerun it to check them
(`.venv/bin/python scripts/reliability.py --write docs/reliability.md`). Measured on {host}.

## Figures

| what was tried | how many | outcome |
|---|---|---|
{table}

The mutated graphs (numbers, names and op types in the graph replaced by others of the same size so the
protobuf stays valid, several at once, or truncation; then re-hashed into the manifest):

{stages}

{harm_sentence} The probe's isolation itself is tested with a child that dies of SIGSEGV
(tests/runtime/test_hostile_folders.py), a 64 MiB memory limit and a 0.05 s time limit.

## Hostile folders: the policy

An export folder may come from anyone. `ExportFolder` (runtime/folder.py) reads a file only when all of
this holds, and raises `ManifestError` otherwise, before anything outside the folder is opened:

- the manifest path is plain and relative: no absolute path, `..`, `.` or empty part, backslash, colon or
  control character (all manifest paths are checked when the folder is opened);
- the folders on the way are opened one at a time from the export folder with `O_NOFOLLOW | O_DIRECTORY`,
  so no symbolic link is followed anywhere on the path, even one swapped in while we look;
- the file is a regular file with exactly one hard link, checked with `lstat` before it is opened (so a
  FIFO, socket or device is never opened, and neither is a hard link to a file elsewhere) and again with
  `fstat` on the opened descriptor (opened `O_NONBLOCK | O_NOFOLLOW`), which must be the same inode;
- its size must be the manifest's before a byte is read (a sparse terabyte or /dev/zero is never read),
  and its sha256 the manifest's after; manifest.json itself is capped at 64 MiB;
- external data (the weights of a graph past protobuf's 2 GB limit, kept in a file beside it) is read
  only from a file the manifest lists as that graph's weights (kind `weights`, options `{"graph": ...}`),
  with its size and sha256 checked like every other file, and never by path: the runtime reads the file
  once, slices each tensor out of the checked bytes and hands them to ONNX Runtime with
  `SessionOptions.add_external_initializers` (the Node host: `externalData` with the bytes), so ONNX
  Runtime opens no file. The runtime cannot import `onnx`, so a small protobuf scan walks every tensor of
  the model (initializers, Constant and other tensor attributes, subgraphs of If/Loop/Scan, functions,
  training info); only the main graph's initializers may use external data, each naming the listed
  weights file by its plain relative location, its offset and length inside the file's checked size.
  Everything else is refused: a location leaving the folder (`../../secret`, an absolute path), a file
  the manifest does not list for that graph (one in the caller's working folder, the tokenizer), ONNX
  Runtime's `*/_ORT_MEM_ADDR_/*` marker (which reads process memory), an offset or length past the file,
  external data anywhere but the main initializers, and model bytes naming external data handed to a
  session without their checked tensors. This does not depend on the ONNX Runtime version installed.

**Hard links** are refused outright (`st_nlink > 1`) rather than judged: a second name for an inode cannot
be told apart from a link to a file outside the folder. Copy exports with `cp -r`, not `cp -l`; git
checkouts and archives never produce hard links.

**The canary.** Each case runs with a canary file outside the export folder holding a secret. The canary's
access time is set older than its modification time; Linux (`relatime`, the default) then refreshes the
access time on the next read, so a read would show. The script first proves the file system records reads
with a control file (it stops on a `noatime` mount), and also checks that the secret never appears in an
error message. The canary is hard-linked into the folder for the hard-link cases, with the very bytes the
manifest expects, so only the link count gives it away.

## Untrusted exports: the probe

A malformed ONNX model can crash ONNX Runtime (a segfault in C++ kills the whole process), hang it or make
it allocate without bound. `onnxformer inspect --untrusted`, `onnxformer verify --untrusted` and
`load(folder, untrusted=True)` first run `probe_export` (runtime/probe.py): a child process checks every
file, creates an ONNX Runtime session for every graph, runs the golden test data and, for a model, loads
it and runs one tiny request, under `RLIMIT_AS` (4 GiB by default), a wall-clock timeout (its process
group is killed) and a CPU limit, with no core dumps and capped file writes. The result says what happened:
`ok`, `error` (an exception: the caller would only have got an exception), `crashed` (with the signal),
`timed_out` or `out_of_memory`. The CLI stops on the last three; `load` loads only after `ok`, and
refuses the folder if its manifest changed since the probe (the probe returns the manifest's sha256, and
every file is checked against the manifest).

## Bad input

Every runtime call checks its input before ONNX Runtime sees it and raises `InputError` or `ConfigError`
(both `OnnxformerError`) naming the problem and the fix. The fuzz found, and this work fixed:
lone surrogates in text (the tokenizer raised `TypeError`), a temperature so small that logits / T
overflowed (sampling returned garbage; it now takes the greedy limit), 0-d numpy arrays as token lists
(`TypeError`), `stop_tokens` given as one int (`TypeError`), a beam search `length_penalty` whose power
overflowed (`OverflowError`, `ZeroDivisionError`; now limited to [-10, 10]), a temperature given as an
int too large for a float (`TypeError`, `OverflowError`; now at most 1e300), and `num_beams` without a
bound (memory; now at most the vocabulary size). A text too long for the model by its length alone is
refused before it is tokenized (a byte-level BPE token covers at most as many characters as its longest
vocabulary entry), so a megabyte prompt costs microseconds.

## Nothing lost

`write_folder_atomically` (builder/atomic.py, used by export folders and training checkpoints) writes a
hidden staging folder beside the target, fsyncs every file, writes the marker file (manifest.json,
checkpoint.json) last, and swaps the folder in with one `renameat2(RENAME_EXCHANGE)` on Linux; a folder
being deleted loses its marker first. So the target path always names a whole folder, and a folder a kill
left behind is complete if it holds its marker. `scripts/kill_writes.py` kills writers with SIGKILL at
random moments and before every system call of a write; before the exchange, a kill between the two
renames of the old scheme left no folder at the target path (found by this script, now fixed). Training
resumed after a kill ends with exactly the weights of an uninterrupted run (tests/test_reliability.py),
and `training_state.pt` is read with `torch.load(weights_only=True)`: a file crafted to run code when
unpickled is refused with `CheckpointError` and the code never runs.

## Under load

The model classes keep no per-call state; ONNX Runtime sessions are shared and `run` is thread-safe. 16
threads x 200 requests of mixed prompt lengths give exactly (bitwise) the outputs computed one by one.

## Known limits

- manifest.json carries no checksum of its own. A single-bit flip that leaves it valid JSON changes one
  value; `onnxformer verify` catches those that change what runs (graph inputs and outputs, goldens), and
  the rest change descriptive fields (the table above lists which). A manifest self-digest would close it.
- A killed write leaves its hidden staging folder (`.NAME.tmp-PID-*`) beside the target
  ({k["leftover_folders"]} of the {k["kills"]} kills above left one, counted right after each kill).
  It is never at the target path and is complete whenever it holds its marker; the next write to the same
  target deletes those whose writer (the PID in the name) is no longer running, and leaves a live
  writer's alone.
- Bad input never reaches ONNX Runtime, so its errors only come from a damaged or hostile model that
  loaded; `Session.run` (runtime/session.py) turns them into `InferenceError`. The probe runs the golden
  data and one request first, so `--untrusted` reports them as "error".
- The probe's memory limit is POSIX `RLIMIT_AS`; elsewhere the probe isolates crashes and hangs only.

## Tests

The same properties run in the test suite, with fewer cases (all together about 45 s on two cores):

- tests/runtime/test_hostile_folders.py: paths, links, special files, huge and malformed manifests,
  external data, the probe (ok, error, out of memory, timeout, a simulated SIGSEGV), `--untrusted`;
- tests/runtime/test_fuzz_inputs.py: hypothesis over generate, generate_ids, stream, embed, classify,
  fill_mask, seq2seq (beam search too), decode and the CLI (`ONNXFORMER_FUZZ_EXAMPLES` raises the count);
- tests/runtime/test_concurrency.py: 16 threads x 200 requests, encoder and generator;
- tests/test_reliability.py: SIGKILL during export and checkpoint writes (at least 20 random kills each
  plus system-call kills), training killed and resumed, a code payload in training_state.pt.

## Reproduce

    .venv/bin/python scripts/reliability.py --write docs/reliability.md     # every figure, ~6 min
    .venv/bin/python scripts/kill_writes.py export exported/bert exported/gpt --random 100 --points
    .venv-runtime/bin/python scripts/soak.py
    ONNXFORMER_FUZZ_EXAMPLES=2000 .venv-runtime/bin/python -m pytest tests/runtime/test_fuzz_inputs.py
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer cases of each kind, no soak")
    parser.add_argument("--write", type=Path, help="write the page here (e.g. docs/reliability.md)")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument("--from-json", type=Path, help="render the page from figures written by --json")
    args = parser.parse_args(argv)
    if args.from_json:
        markdown = page(json.loads(args.from_json.read_text()))
        if args.write:
            args.write.write_text(markdown)
        else:
            say(markdown)
        return
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    quick = args.quick
    import onnxruntime

    results: dict = {
        "host": f"{os.cpu_count()} CPU cores, Python {sys.version.split()[0]}, ONNX Runtime "
        f"{onnxruntime.__version__}",
        "onnxruntime": onnxruntime.__version__,
    }
    steps = [
        ("hostile", lambda: hostile_folders(FAMILIES)),
        ("corruptions", lambda: corruptions(FAMILIES, bit_flips=20 if quick else 200)),
        ("mutants", lambda: mutated_models(FAMILIES, 5 if quick else 60)),
        ("fuzz", lambda: fuzzed_inputs(100 if quick else 1500)),
        ("kills", lambda: kills(20 if quick else 100)),
        ("threads", lambda: threads()),
    ]
    if not quick:
        steps.append(("soak", soak))
    for name, step in steps:
        start = time.monotonic()
        results[name] = step()
        shown = {key: value for key, value in results[name].items() if key not in ("reports", "problems")}
        say(f"{name} ({time.monotonic() - start:.0f} s): {json.dumps(shown, default=str)}")
    markdown = page(results)
    if args.write:
        args.write.write_text(markdown)
        say(f"wrote {args.write}")
    else:
        say(markdown)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
