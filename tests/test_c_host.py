"""The C host (hosts/c): built with gcc, warnings as errors, AddressSanitizer and UBSan, then run on the
reference exports: every golden passes, greedy generation gives the goldens' ids, and hostile folders
(the shared path cases, links, special files, altered bytes, external data) are refused with a clear
message and a non-zero exit.

The build needs gcc, make, apt-get/dpkg-deb and pip (hosts/c/setup.sh fetches ONNX Runtime and cJSON from
the Debian and PyPI registries into hosts/c/build/deps); without them the tests fail and say what to
install, they never skip.
"""

import hashlib
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from onnxformer.runtime import protobuf

ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "hosts" / "c"
BUILD = HOST / "build" / "asan"
EXPORTED = ROOT / "exported"
PATH_CASES = ROOT / "tests" / "path_cases.json"
INSTALL = (
    "install the C toolchain (Debian: `apt-get install -y build-essential dpkg-dev python3-pip`), "
    "then `make -C hosts/c` fetches ONNX Runtime and cJSON from the registries (hosts/c/README.md)"
)
# Leaks, heap errors and undefined behaviour all end the process with a non-zero status.
SANITIZERS = {
    "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:abort_on_error=0:exitcode=99",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=98",
}


@pytest.fixture(scope="session")
def c_host() -> Path:
    """The sanitized onnxformer-c, built by `make -C hosts/c` (a no-op when make already built it)."""
    return c_host_binary()


def c_host_binary() -> Path:
    """The build behind the c_host fixture, for other modules' tests (make is a no-op once built)."""
    missing = [tool for tool in ("gcc", "make", "apt-get", "dpkg-deb") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"the C host cannot be built: {', '.join(missing)} missing; {INSTALL}")
    built = subprocess.run(
        ["make", "-C", str(HOST), f"PYTHON={sys.executable}"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if built.returncode != 0:
        pytest.fail(f"`make -C hosts/c` failed; {INSTALL}\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}")
    return BUILD / "onnxformer-c"


def run(
    binary: Path, *args: str, timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(binary), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **SANITIZERS},
        cwd=cwd,
    )
    assert result.returncode not in (98, 99), f"sanitizer report:\n{result.stderr[-4000:]}"
    assert "ERROR: AddressSanitizer" not in result.stderr and "runtime error:" not in result.stderr, (
        result.stderr[-4000:]
    )
    return result


def test_built_with_gcc_warnings_as_errors_and_the_sanitizers(c_host: Path) -> None:
    makefile = (HOST / "Makefile").read_text()
    assert re.search(r"^CC = gcc$", makefile, re.M)
    assert "-Wall -Wextra -Werror" in makefile
    needed = subprocess.run(["readelf", "-d", str(c_host)], capture_output=True, text=True, check=True)
    assert "libasan" in needed.stdout and "libubsan" in needed.stdout, needed.stdout
    assert "libonnxruntime.so.1" in needed.stdout and "libcjson" in needed.stdout
    # Debian's 1.21 headers ask for C API version 21, which the 1.32 library (the Python runtime's) serves.
    header = (HOST / "build/deps/usr/include/onnxruntime/onnxruntime_c_api.h").read_text()
    assert re.search(r"#define ORT_API_VERSION 21\b", header)
    assert (HOST / "build/deps/lib/libonnxruntime.so.1.32.0").is_file()
    assert "libpcre2-8" in needed.stdout and "libutf8proc" in needed.stdout


# ---- goldens -------------------------------------------------------------------------------------

RESULT = re.compile(
    r"^  (ok  |FAIL) (graph|greedy|embedding|tokenizer) (\S+) \[(.*)\] (\S*)(?:  max diff (\S+) <= (\S+))?"
)


def expected_results(folder: Path) -> int:
    """How many results a full verify of `folder` gives: one per graph-golden output, per tokenizer golden,
    per greedy generation and per embedding."""
    manifest = json.loads((folder / "manifest.json").read_text())
    count = sum(len(case["outputs"]) for graph in manifest["goldens"]["graphs"] for case in graph["cases"])
    end_to_end = json.loads((folder / manifest["goldens"]["end_to_end"]).read_text())
    return (
        count
        + len(end_to_end.get("tokenizer", []))
        + len(end_to_end.get("greedy", []))
        + len(end_to_end.get("embeddings", {}).get("items", []))
    )


@pytest.mark.parametrize("family", ["gpt", "bert", "t5"])
def test_every_golden_passes(c_host: Path, family: str) -> None:
    folder = EXPORTED / family
    result = run(c_host, "verify", str(folder))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    lines = [match for line in result.stdout.splitlines() if (match := RESULT.match(line))]
    assert len(lines) == expected_results(folder)
    assert all(match.group(1) == "ok  " for match in lines)
    worst: dict[str, float] = {}
    for match in lines:
        if match.group(6) is not None:
            diff, allowed = float(match.group(6)), float(match.group(7))
            assert diff <= allowed
            worst[match.group(3)] = max(worst.get(match.group(3), 0.0), diff)
    assert worst, "no difference was measured"
    print(f"C host max abs diff, {family}: " + ", ".join(f"{f} {d:.2e}" for f, d in worst.items()))
    summary = re.search(r"(\d+) files checked, (\d+) passed, (\d+) failed", result.stdout)
    assert summary is not None and int(summary.group(3)) == 0
    manifest = json.loads((folder / "manifest.json").read_text())
    assert int(summary.group(1)) == len(manifest["files"])
    _check_readme_row(family, lines, summary)


def test_imported_exports_pass_their_goldens(c_host: Path, hf_exports: dict[str, tuple[Path, Path]]) -> None:
    """Every Hugging Face architecture's export (tests/conftest.py HF_EXPORTS) verifies in C: graph goldens,
    the tokenizer goldens (through the C tokenizer) and greedy ids."""
    for name, (_, folder) in hf_exports.items():
        result = run(c_host, "verify", str(folder))
        assert result.returncode == 0, f"{name}: " + result.stdout[-3000:] + result.stderr[-2000:]
        lines = [match for line in result.stdout.splitlines() if (match := RESULT.match(line))]
        assert lines and all(match.group(1) == "ok  " for match in lines), name
        assert len(lines) == expected_results(folder), name
        assert any(match.group(2) == "tokenizer" for match in lines), name
        worst = max((float(m.group(6)) for m in lines if m.group(6) is not None), default=None)
        assert worst is not None, f"{name}: no difference was measured"
        print(f"C host, imported {name}: {len(lines)} results ok, max abs diff {worst:.2e}")


def _readme_row(family: str) -> re.Match:
    readme = (HOST / "README.md").read_text()
    row = re.search(
        rf"^\| exported/{family} \| (\d+) \| (\d+) passed \| (\S+) \((\S+) (\S+)\) \| (\d+) of (\d+)"
        r"(?: exact|, largest difference (\S+)) \|$",
        readme,
        re.M,
    )
    assert row is not None, f"hosts/c/README.md's measured table has no exported/{family} row"
    return row


def _check_readme_row(family: str, lines: list[re.Match], summary: re.Match) -> None:
    """hosts/c/README.md's measured row against this run: counts equal, differences within a factor of 2,
    the largest graph difference where the README says, every difference under half its allowance."""
    row = _readme_row(family)
    assert (row.group(1), row.group(2)) == (summary.group(1), summary.group(2)), row.group(0)
    graphs = [match for match in lines if match.group(2) == "graph"]
    largest = max(graphs, key=lambda match: float(match.group(6)))
    stated = float(row.group(3))
    assert stated / 2 <= float(largest.group(6)) <= stated * 2, (row.group(0), largest.group(0))
    assert (largest.group(3), largest.group(5)) == (row.group(4), row.group(5)), largest.group(0)
    assert all(float(match.group(6)) < float(match.group(7)) / 2 for match in graphs)
    ends = [match for match in lines if match.group(2) in ("greedy", "embedding")]
    assert int(row.group(6)) == int(row.group(7)) == len(ends) > 0, row.group(0)
    if row.group(8) is not None:
        worst = max(float(match.group(6)) for match in ends)
        assert float(row.group(8)) / 2 <= worst <= float(row.group(8)) * 2, (row.group(0), worst)


def test_the_readmes_generate_line_prints_what_it_shows(c_host: Path) -> None:
    readme = (HOST / "README.md").read_text()
    command, shown = re.search(
        r"^hosts/c/build/asan/onnxformer-c (generate .*)\n# (\{.*\})$", readme, re.M
    ).groups()
    result = run(c_host, *command.split(), cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(shown)


def _greedy_cases() -> list[tuple[str, dict]]:
    cases = []
    for family in ("gpt", "t5"):
        golden = json.loads((EXPORTED / family / "goldens" / "end_to_end.json").read_text())
        cases += [(family, item) for item in golden["greedy"]]
    return cases


@pytest.mark.parametrize(("family", "item"), _greedy_cases(), ids=lambda value: str(value)[:24])
def test_generate_gives_the_golden_ids(c_host: Path, family: str, item: dict) -> None:
    result = run(
        c_host,
        "generate",
        str(EXPORTED / family),
        "--ids",
        ",".join(map(str, item["input_ids"])),
        "--max-new-tokens",
        str(item["max_new_tokens"]),
        "--stop-tokens",
        ",".join(map(str, item["stop_tokens"])),
    )
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    assert got == {"output_ids": item["output_ids"], "finish_reason": item["finish_reason"]}


def _the_cat() -> list[int]:
    golden = json.loads((EXPORTED / "gpt" / "goldens" / "end_to_end.json").read_text())
    (item,) = [item for item in golden["greedy"] if item["input_ids"] == [1, 90, 263, 310]]
    assert item["finish_reason"] == "stop"  # so the manifest's larger max_new_tokens changes nothing
    return item["output_ids"]


def test_the_readme_lines_compile_and_generate_the_golden_ids(c_host: Path, tmp_path: Path) -> None:
    """The ten lines of hosts/c/README.md, compiled as they stand into a program (gcc, warnings as errors,
    the sanitizers) and run on exported/gpt with the manifest's defaults."""
    readme = (HOST / "README.md").read_text()
    (block,) = re.findall(r"```c\n(.*?)```", readme, re.S)
    lines = block.strip().splitlines()
    assert lines[0] == '#include "onnxformer.h"'
    body = [line for line in lines[1:] if line.strip()]
    assert len(body) + 1 == 10  # the include and nine statements
    source = tmp_path / "readme.c"
    source.write_text(
        '#include <stdio.h>\n#include "onnxformer.h"\n\nint main(void) {\n'
        + "\n".join(body)
        + "\n  return 0;\n}\n"
    )
    deps = HOST / "build" / "deps" / "lib"
    program = tmp_path / "readme"
    flags = ["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined"]
    compiled = subprocess.run(
        ["gcc", *flags, f"-I{HOST / 'include'}", str(source), str(BUILD / "libonnxformer.a"), f"-L{deps}",
         f"-Wl,-rpath,{deps}", "-lonnxruntime", "-lcjson", "-lpcre2-8", "-lutf8proc", "-lm",
         "-o", str(program)],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    result = subprocess.run(
        [str(program)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **SANITIZERS},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{_text_of(_the_cat())}\n{len(_the_cat())} tokens (stop)\n"


def _text_of(ids: list[int]) -> str:
    """What the Python runtime decodes the ids to."""
    from onnxformer.runtime import load

    return load(EXPORTED / "gpt", device="cpu").tokenizer.decode(ids)


def test_the_example_program_generates_the_golden_ids(c_host: Path) -> None:
    """examples/generate.c frames "the cat" itself: <s> + its tokens, the golden's input ids."""
    result = run(c_host.parent / "example-generate", str(EXPORTED / "gpt"))
    assert result.returncode == 0, result.stderr
    text, ids = result.stdout.splitlines()
    assert (text, ids.split()) == (_text_of(_the_cat()), [*map(str, _the_cat()), "(stop)"])


def test_generation_refuses_bad_input(c_host: Path) -> None:
    outside = run(c_host, "generate", str(EXPORTED / "gpt"), "--ids", "1,400")
    assert outside.returncode == 2 and "InputError" in outside.stderr
    assert "outside the vocabulary" in outside.stderr
    too_long = run(c_host, "generate", str(EXPORTED / "gpt"), "--ids", ",".join(["5"] * 65))
    assert too_long.returncode == 2 and "context is 64" in too_long.stderr
    encoder = run(c_host, "generate", str(EXPORTED / "bert"), "--ids", "6,5")
    assert encoder.returncode == 2 and "encode export" in encoder.stderr
    usage = run(c_host, "generate", str(EXPORTED / "gpt"), "--ids", "1,x")
    assert usage.returncode == 2 and "comma-separated" in usage.stderr


# ---- a golden that does not hold fails -------------------------------------------------------------


def _copy(tmp_path: Path, family: str) -> Path:
    folder = tmp_path / family
    shutil.copytree(EXPORTED / family, folder)
    return folder


def _rehash(folder: Path, relative: str) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    data = (folder / relative).read_bytes()
    for entry in manifest["files"]:
        if entry["path"] == relative:
            entry.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_a_changed_golden_value_fails_verify(c_host: Path, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "bert")
    relative = "goldens/encoder/test_data_set_0/output_1.pb"  # sentence_embedding; raw_data comes last
    data = bytearray((folder / relative).read_bytes())
    (last,) = struct.unpack("<f", data[-4:])
    data[-4:] = struct.pack("<f", last + 0.5)
    (folder / relative).write_bytes(bytes(data))
    _rehash(folder, relative)
    result = run(c_host, "verify", str(folder))
    assert result.returncode == 1
    (failed,) = [line for line in result.stdout.splitlines() if line.startswith("  FAIL")]
    assert "encoder.onnx [B=1 T=4] sentence_embedding" in failed
    diff = float(re.search(r"max diff (\S+)", failed).group(1))
    assert 0.49 < diff < 0.51


def test_a_case_allowance_is_enforced_where_the_graph_tolerance_would_pass(
    c_host: Path, tmp_path: Path
) -> None:
    """The C host applies each case's own allowance (the float64 figures), not only the graph's atol and
    rtol: a difference between the two fails that case alone."""
    sys.path.insert(0, str(ROOT / "tests" / "runtime"))
    from tamper import move_past_the_case_allowance

    folder = _copy(tmp_path, "bert")
    moved = move_past_the_case_allowance(folder)
    result = run(c_host, "verify", str(folder))
    assert result.returncode == 1, result.stdout[-2000:]
    (failed,) = [line for line in result.stdout.splitlines() if line.startswith("  FAIL")]
    assert f"{moved.file} [{moved.label}] {moved.output}" in failed
    diff, allowed = map(float, re.search(r"max diff (\S+) <= (\S+)", failed).groups())
    print(f"{failed.strip()} (graph-wide {moved.graph_wide:.2e})")
    assert moved.allowed < diff < moved.graph_wide and allowed == pytest.approx(moved.allowed, rel=0.01)


def test_a_changed_greedy_golden_fails_verify(c_host: Path, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "gpt")
    relative = "goldens/end_to_end.json"
    golden = json.loads((folder / relative).read_text())
    golden["greedy"][1]["output_ids"][2] += 1
    (folder / relative).write_text(json.dumps(golden))
    _rehash(folder, relative)
    result = run(c_host, "verify", str(folder))
    assert result.returncode == 1
    (failed,) = [line for line in result.stdout.splitlines() if line.startswith("  FAIL")]
    assert "greedy" in failed and "first difference at new token 2" in failed


# ---- hostile folders -------------------------------------------------------------------------------


def _minimal(folder: Path, paths: list[str], data: bytes = b"payload") -> Path:
    """A folder whose format 2 manifest lists `paths` (each with the size and sha256 of `data`)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = [{"path": path, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)} for path in paths]
    manifest = {"format_version": 2, "export_kind": "blocks", "files": files}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _path_cases() -> list[tuple[str, bool, str]]:
    """tests/path_cases.json, the file the Python and Node hosts' tests read too."""
    cases = json.loads(PATH_CASES.read_text())
    return [(case["path"], True, case["reason"]) for case in cases["accept"]] + [
        (case["path"], False, case["reason"]) for case in cases["refuse"]
    ]


@pytest.mark.parametrize(("path", "accept", "reason"), _path_cases(), ids=lambda value: repr(value)[:30])
def test_the_shared_path_cases(c_host: Path, tmp_path: Path, path: str, accept: bool, reason: str) -> None:
    payload = protobuf.field(1, 10)  # ModelProto{ir_version: 10}: an .onnx path is read as a model
    folder = _minimal(tmp_path / "export", [path], payload)
    if accept:
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(payload)
    result = run(c_host, "check", str(folder))
    if accept:
        assert result.returncode == 0, f"{path!r} ({reason}) was refused: {result.stderr}"
        assert "1 files match manifest.json" in result.stdout
    else:
        assert result.returncode == 2, f"{path!r} ({reason}) was accepted"
        message = result.stderr
        assert message.startswith("onnxformer-c: ManifestError: ")
        if "\x00" in path:  # cJSON strings end at a NUL, so the manifest is refused as a whole
            assert "holds a NUL character" in message
        else:
            assert "not a plain relative path inside the folder" in message
        assert message.count("\n") == 1  # a newline in the path is escaped, not printed
    if "\x00" not in path:  # argv cannot carry a NUL
        direct = run(c_host, "check-path", path)
        assert (direct.returncode == 0) == accept, direct.stderr


def _canary(tmp_path: Path) -> Path:
    canary = tmp_path / "canary"
    canary.write_bytes(b"canary-secret")
    return canary


def _check_fails(c_host: Path, folder: Path, match: str, command: str = "check") -> str:
    result = run(c_host, command, str(folder), timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert match in result.stderr, result.stderr
    return result.stderr


def test_a_file_that_is_a_link_out_of_the_folder_is_refused(c_host: Path, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "bert")
    (folder / "tokenizer.json").unlink()
    os.symlink(_canary(tmp_path), folder / "tokenizer.json")
    _check_fails(c_host, folder, "symbolic link")
    _check_fails(c_host, folder, "symbolic link", "verify")


def test_a_folder_on_the_way_that_is_a_link_is_refused(c_host: Path, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "bert")
    outside = tmp_path / "outside-goldens"
    shutil.move(folder / "goldens", outside)
    os.symlink(outside, folder / "goldens")
    _check_fails(c_host, folder, "goes through a symbolic link")


def test_the_manifest_as_a_link_is_refused(c_host: Path, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "bert")
    shutil.move(folder / "manifest.json", tmp_path / "manifest-outside.json")
    os.symlink(tmp_path / "manifest-outside.json", folder / "manifest.json")
    _check_fails(c_host, folder, "symbolic link")


def test_a_hard_link_is_refused(c_host: Path, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "bert")
    canary = tmp_path / "canary"
    shutil.copyfile(folder / "tokenizer.json", canary)
    (folder / "tokenizer.json").unlink()
    os.link(canary, folder / "tokenizer.json")  # the same bytes: only the link count gives it away
    _check_fails(c_host, folder, "hard links")


@pytest.mark.parametrize("kind", ["fifo", "socket", "folder"])
def test_special_files_are_refused_without_hanging(c_host: Path, tmp_path: Path, kind: str) -> None:
    folder = _copy(tmp_path, "bert")
    target = folder / "tokenizer.json"
    target.unlink()
    server = None
    if kind == "fifo":
        os.mkfifo(target)  # a blocking open would wait for a writer forever
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(target))
    else:
        target.mkdir()
    try:
        _check_fails(c_host, folder, "not a regular file")
    finally:
        if server is not None:
            server.close()


def test_the_manifest_as_a_fifo_does_not_hang(c_host: Path, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "bert")
    (folder / "manifest.json").unlink()
    os.mkfifo(folder / "manifest.json")
    _check_fails(c_host, folder, "is a FIFO")


def test_altered_and_huge_files_are_refused(c_host: Path, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "bert")
    tokenizer = folder / "tokenizer.json"
    data = bytearray(tokenizer.read_bytes())
    data[100] ^= 1
    tokenizer.write_bytes(bytes(data))
    _check_fails(c_host, folder, "does not match its sha256")
    with open(tokenizer, "r+b") as handle:
        handle.truncate(1 << 40)  # a sparse terabyte: refused by its size, never read
    _check_fails(c_host, folder, "truncated or altered")
    with open(folder / "manifest.json", "r+b") as handle:
        handle.truncate(1 << 40)
    _check_fails(c_host, folder, "more than the")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[" * 100_000, "not valid JSON"),
        ('{"format_version": 2, "files": [], "files": []}', "twice in one object"),
        (b'{"format_version": 2, "files": [\xff]}', "not UTF-8"),
        (
            '{"format_version": 1, "export_kind": "model", "files": []}',
            "re-export the folder with this onnxformer: `onnxformer export CHECKPOINT --out DIR`",
        ),
        ('{"format_version": 3, "files": []}', "upgrade onnxformer"),
        ('{"format_version": 2, "files": [{"path": "a", "size": -1, "sha256": "00"}]}', "needs a size"),
        ("{}", "format_version is missing"),
    ],
    ids=["deep", "duplicate-key", "utf8", "format-1", "format-3", "bad-entry", "empty"],
)
def test_malformed_manifests_are_refused(c_host: Path, tmp_path: Path, text: str | bytes, match: str) -> None:
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "manifest.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    _check_fails(c_host, folder, match)


def _external_tensor(location: str) -> bytes:
    """TensorProto{dims: 4, data_type: FLOAT, name: "w", external_data: {location}, data_location: 1}."""
    entry = protobuf.field(1, b"location") + protobuf.field(2, location.encode())
    return (
        protobuf.field(1, 4)
        + protobuf.field(2, 1)
        + protobuf.field(8, b"w")
        + protobuf.field(13, entry)
        + protobuf.field(14, 1)
    )


@pytest.mark.parametrize(
    "extra",
    [
        protobuf.field(7, protobuf.field(5, _external_tensor("../canary"))),  # an initializer
        protobuf.field(7, protobuf.field(5, _external_tensor("*/_ORT_MEM_ADDR_/*"))),  # ORT's memory marker
        protobuf.field(  # a tensor inside an If node's subgraph: model.graph.node.attribute.g.initializer
            7,
            protobuf.field(1, protobuf.field(5, protobuf.field(6, protobuf.field(5, _external_tensor("x"))))),
        ),
    ],
    ids=["initializer", "memory-marker", "subgraph"],
)
def test_onnx_external_data_is_refused(c_host: Path, tmp_path: Path, extra: bytes) -> None:
    folder = _copy(tmp_path, "bert")
    model = folder / "encoder.onnx"
    model.write_bytes(model.read_bytes() + extra)  # protobuf merges a repeated message field
    _rehash(folder, "encoder.onnx")
    _check_fails(c_host, folder, "keeps tensor data in an external file")
    _check_fails(c_host, folder, "external file", "verify")


def test_sha256_of_every_block_boundary(c_host: Path, tmp_path: Path) -> None:
    """The host's own SHA-256 against hashlib at the sizes where padding changes (0, 55, 56, 64, ...)."""
    folder = tmp_path / "export"
    folder.mkdir()
    files = []
    for size in (0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 1000, 1 << 20):
        data = bytes((i * 7 + size) % 251 for i in range(size))
        (folder / f"f{size}").write_bytes(data)
        files.append({"path": f"f{size}", "sha256": hashlib.sha256(data).hexdigest(), "size": size})
    manifest = {"format_version": 2, "export_kind": "blocks", "files": files}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    result = run(c_host, "check", str(folder))
    assert result.returncode == 0, result.stderr
    assert f"{len(files)} files match" in result.stdout
    files[3]["sha256"] = hashlib.sha256(b"other").hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))
    _check_fails(c_host, folder, "f56 does not match its sha256")


def test_a_missing_folder_and_bad_arguments(c_host: Path, tmp_path: Path) -> None:
    _check_fails(c_host, tmp_path / "nowhere", "does not exist", "verify")
    _check_fails(c_host, tmp_path, "has no manifest.json", "verify")
    usage = run(c_host, "frobnicate")
    assert usage.returncode == 2 and "usage: onnxformer-c verify" in usage.stderr


# ---- the parsers on what the Python runtime reads, and on garbage -----------------------------------


def test_tensor_files_read_as_the_python_runtime_reads_them(c_host: Path) -> None:
    """float_data, int64_data, raw_data and empty tensors (hosts/node/tests/fixtures) and real goldens."""
    from onnxformer.runtime.tensorproto import read_tensor

    files = sorted((ROOT / "hosts" / "node" / "tests" / "fixtures").glob("*.pb"))
    files += sorted((EXPORTED / "t5" / "goldens" / "decoder" / "test_data_set_4").glob("*.pb"))
    result = run(c_host, "tensor", *map(str, files))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(files)
    for file, line in zip(files, lines, strict=True):
        name, value = read_tensor(file.read_bytes())
        shape = ", ".join(map(str, value.shape))
        assert line.startswith(f"{file}: {name} data_type "), line
        assert f"shape [{shape}]" in line
        largest = float(abs(value.astype("float64")).max()) if value.size else 0.0
        assert float(line.rsplit(" ", 1)[1]) == pytest.approx(largest, rel=1e-5)


def test_garbage_tensor_files_and_manifests_are_refused_cleanly(c_host: Path, tmp_path: Path) -> None:
    """Random byte changes in golden tensors and in a manifest: every file is either read or refused
    with a typed message; never a crash, a sanitizer report or a hang."""
    import random

    chooser = random.Random(17)
    sources = sorted((EXPORTED / "gpt" / "goldens" / "decoder" / "test_data_set_1").glob("*.pb"))
    tensors = []
    for index in range(300):
        data = bytearray(chooser.choice(sources).read_bytes())
        for _ in range(chooser.randint(1, 4)):
            at = chooser.randrange(min(len(data), 64))  # the header: keys, dims, type, name, lengths
            data[at] = chooser.randrange(256)
        if index % 5 == 0:
            del data[chooser.randrange(len(data)) :]
        (tmp_path / f"t{index}.pb").write_bytes(bytes(data))
        tensors.append(str(tmp_path / f"t{index}.pb"))
    for index, raw in enumerate([b"abcd", None]):  # a huge shape in a tiny file: refused, not allocated
        header = protobuf.field(1, 10**9) + protobuf.field(1, 10**9) + protobuf.field(2, 1)
        (tmp_path / f"huge{index}.pb").write_bytes(header + (protobuf.field(9, raw) if raw else b""))
        tensors.append(str(tmp_path / f"huge{index}.pb"))
    result = run(c_host, "tensor", *tensors, timeout=120)
    assert result.returncode in (0, 2)
    read = len(result.stdout.splitlines())
    refused = result.stderr.count("onnxformer-c: ManifestError: ")
    assert read + refused == len(tensors) and refused > 0, result.stderr[-2000:]

    manifest = (EXPORTED / "bert" / "manifest.json").read_bytes()
    folders = []
    for index in range(150):
        data = bytearray(manifest)
        for _ in range(chooser.randint(1, 3)):
            data[chooser.randrange(len(data))] = chooser.choice(b'{}[]",:\\0-.e \xff\x00')
        folder = tmp_path / f"m{index}"
        folder.mkdir()
        (folder / "manifest.json").write_bytes(bytes(data))
        folders.append(str(folder))
    result = run(c_host, "check", *folders, timeout=120)
    assert result.returncode == 2  # no folder has its files
    assert result.stderr.count("onnxformer-c: ManifestError: ") == len(folders), result.stderr[-2000:]


def test_a_blocks_export_verifies_its_graphs_and_cannot_generate(c_host: Path, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "gpt")
    manifest = json.loads((folder / "manifest.json").read_text())
    for key in ("task", "io", "kv_cache", "generation", "framing", "graphs", "tokenizer", "family"):
        manifest.pop(key, None)
    manifest.update(export_kind="blocks", goldens={**manifest["goldens"], "end_to_end": None})
    (folder / "manifest.json").write_text(json.dumps(manifest))
    result = run(c_host, "verify", str(folder))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    graph_outputs = sum(
        len(case["outputs"]) for graph in manifest["goldens"]["graphs"] for case in graph["cases"]
    )
    assert f"{graph_outputs} passed, 0 failed" in result.stdout
    refused = run(c_host, "generate", str(folder), "--ids", "1")
    assert refused.returncode == 2 and 'is a "blocks" export, not a model' in refused.stderr


def test_an_unknown_cache_layout_is_refused_before_any_session(c_host: Path, tmp_path: Path) -> None:
    """The host binds the two layouts the runtime writes (tests/test_c_optimized.py runs the in-place one);
    another is refused in one line before ONNX Runtime runs any graph."""
    folder = _copy(tmp_path, "gpt")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["kv_cache"]["layout"] = ["batch", "sequence", "heads", "head_dim"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    for command in (["verify", str(folder)], ["generate", str(folder), "--ids", "1,90"]):
        result = run(c_host, *command)
        assert result.returncode == 2, result.stdout[-2000:] + result.stderr
        assert result.stderr.count("\n") == 1, result.stderr
        assert 'kv_cache.layout must be ["batch", "heads", "sequence", "head_dim"]' in result.stderr
        assert not re.search(RESULT.pattern, result.stdout, re.M), result.stdout[-2000:]  # no golden ran


def test_an_input_the_task_cannot_feed_is_named(c_host: Path, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "bert")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["io"]["encoder"]["inputs"].append("pixel_values")
    (folder / "manifest.json").write_text(json.dumps(manifest))
    _check_fails(c_host, folder, "pixel_values, which an encode export's encoder cannot be fed", "verify")


def test_a_golden_folder_outside_the_export_is_refused(c_host: Path, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "bert")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["goldens"]["graphs"][0]["cases"][0]["dir"] = "goldens/../../outside"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    _check_fails(c_host, folder, "'goldens/../../outside', which is not a plain relative path", "verify")


def _tensor_proto(name: str, data_type: int, dims: list[int], raw: bytes) -> bytes:
    message = b"".join(protobuf.field(1, dim) for dim in dims) + protobuf.field(2, data_type)
    return message + protobuf.field(8, name.encode()) + protobuf.field(9, raw)


def test_a_golden_of_another_shape_or_type_fails_that_case_only(c_host: Path, tmp_path: Path) -> None:
    """A golden output reshaped (1, D) -> (D, 1) fails on its shape; an input of the wrong dtype makes
    ONNX Runtime refuse the run: that case fails with the engine's message, and every other case runs."""
    from onnxformer.runtime.tensorproto import read_tensor

    folder = _copy(tmp_path, "bert")
    case = "goldens/encoder/test_data_set_0"
    _, embedding = read_tensor((folder / case / "output_1.pb").read_bytes())  # sentence_embedding (1, D)
    reshaped = _tensor_proto("sentence_embedding", 1, [embedding.shape[1], 1], embedding.tobytes())
    (folder / case / "output_1.pb").write_bytes(reshaped)
    _rehash(folder, f"{case}/output_1.pb")
    other = "goldens/encoder/test_data_set_1"
    _, ids = read_tensor((folder / other / "input_0.pb").read_bytes())
    as_int32 = _tensor_proto("input_ids", 6, list(ids.shape), ids.astype("<i4").tobytes())
    (folder / other / "input_0.pb").write_bytes(as_int32)
    _rehash(folder, f"{other}/input_0.pb")
    result = run(c_host, "verify", str(folder))
    assert result.returncode == 1
    failed = [line for line in result.stdout.splitlines() if line.startswith("  FAIL")]
    assert len(failed) == 2, failed
    width = embedding.shape[1]
    assert "sentence_embedding" in failed[0] and f"(shape [1,{width}], golden [{width},1])" in failed[0]
    assert "[B=4 T=17]" in failed[1] and "ONNX Runtime failed running encoder.onnx" in failed[1]
    total = expected_results(folder)
    outputs_of_case_1 = len(
        json.loads((folder / "manifest.json").read_text())["goldens"]["graphs"][0]["cases"][1]["outputs"]
    )
    # the failed run is one result for its outputs; the reshaped golden is one of the other results
    assert f"{total - outputs_of_case_1 - 1} passed, 2 failed" in result.stdout


def test_a_model_onnx_runtime_cannot_load_is_a_typed_error(c_host: Path, tmp_path: Path) -> None:
    folder = _copy(tmp_path, "bert")
    (folder / "encoder.onnx").write_bytes(protobuf.field(1, 10))  # ModelProto{ir_version: 10}, no graph
    _rehash(folder, "encoder.onnx")
    stderr = _check_fails(
        c_host, folder, "InferenceError: ONNX Runtime failed loading encoder.onnx", "verify"
    )
    assert stderr.count("\n") == 1


def test_huge_manifests_are_refused_in_linear_time(c_host: Path, tmp_path: Path) -> None:
    """100,000 files listed (one twice) and an object of 100,000 keys: sorted, not compared pairwise
    (pairwise would take minutes; the run's timeout is 60 s)."""
    empty = hashlib.sha256(b"").hexdigest()
    files = [{"path": f"f{i}", "size": 0, "sha256": empty} for i in range(100_000)]
    files.append({"path": "f123", "size": 0, "sha256": empty})
    many = _minimal(tmp_path / "many", [])
    (many / "manifest.json").write_text(
        json.dumps({"format_version": 2, "export_kind": "blocks", "files": files})
    )
    _check_fails(c_host, many, "manifest.json lists f123 twice")
    keys = tmp_path / "keys"
    keys.mkdir()
    members = ",".join(f'"k{i}": 0' for i in range(100_000))
    (keys / "manifest.json").write_text('{"format_version": 2, "files": [], ' + members + ', "k7": 1}')
    _check_fails(c_host, keys, 'has the key "k7" twice in one object')
