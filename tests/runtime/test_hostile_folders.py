"""Hostile export folders: paths that leave the folder, links, special files, external data, and models
that would crash the caller (probed in a child process). Torch-free; runs on copies of exported/bert.

A canary file outside the folder stands for a secret: it must never be read. Reading a file updates its
access time when the access time is older than its modification time (Linux `relatime`, the default), so
the canary is given an old access time and checked afterwards; a control file read on purpose shows the
file system really records reads (otherwise that check is skipped).
"""

import json
import os
import shutil
import socket
import stat
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from onnxformer.cli.main import app
from onnxformer.runtime import load, protobuf
from onnxformer.runtime.errors import ManifestError
from onnxformer.runtime.folder import ExportFolder, plain_parts, refuse_external_data, sha256_bytes
from onnxformer.runtime.probe import probe_export

EXPORTED = Path(__file__).resolve().parents[2] / "exported"
SECRET = b"canary-secret-7d1f"
runner = CliRunner()


@pytest.fixture
def export(tmp_path: Path) -> Path:
    folder = tmp_path / "export" / "bert"
    shutil.copytree(EXPORTED / "bert", folder)
    return folder


class Canary:
    """A file outside the export whose reading would show: an old atime that a read would refresh."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_bytes(SECRET)
        os.utime(path, (1_000_000, 2_000_000))  # atime older than mtime: the next read updates atime

    def untouched(self) -> bool:
        return self.path.stat().st_atime == 1_000_000


@pytest.fixture
def canary(tmp_path: Path) -> Canary:
    control = Canary(tmp_path / "control")
    control.path.read_bytes()
    if control.untouched():
        pytest.skip("this file system does not record reads (noatime); the canary cannot tell")
    return Canary(tmp_path / "canary")


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def _save(folder: Path, manifest: dict) -> None:
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _add_entry(folder: Path, path: str, data: bytes = SECRET) -> None:
    """List one more file (with the size and sha256 of `data`) in the manifest."""
    manifest = _manifest(folder)
    manifest["files"].append(
        {
            "path": path,
            "sha256": sha256_bytes(data),
            "size": len(data),
            "kind": "extra",
            "options": {},
            "inputs": [],
            "outputs": [],
        }
    )
    _save(folder, manifest)


def _rehash(folder: Path, path: str) -> None:
    """Make the manifest agree with the file as it is now (what a hostile author would do)."""
    manifest = _manifest(folder)
    data = (folder / path).read_bytes()
    for entry in manifest["files"]:
        if entry["path"] == path:
            entry.update(sha256=sha256_bytes(data), size=len(data))
    _save(folder, manifest)


def _fails(folder: Path, match: str) -> None:
    """Opening and verifying, and loading, both refuse the folder with a ManifestError."""
    with pytest.raises(ManifestError, match=match):
        ExportFolder.open(folder).verify()
    with pytest.raises(ManifestError, match=match):
        load(folder, device="cpu")


# The path cases every host shares (the Node host's tests and scripts/reliability.py read the same file).
PATH_CASES = json.loads((Path(__file__).resolve().parents[1] / "path_cases.json").read_text())
HOSTILE_PATHS = [case["path"] for case in PATH_CASES["refuse"]]
PLAIN_PATHS = [case["path"] for case in PATH_CASES["accept"]]


def test_the_shared_path_cases_cover_the_old_lists() -> None:
    older = ["../canary", "/etc/passwd", "a/../../canary", "..", ".", "", "./tokenizer.json"]
    older += ["goldens//end_to_end.json", "tokenizer.json/", "..\\canary", "C:/canary", "c:canary", "x\x00y"]
    older += ["line\nbreak", "goldens/./end_to_end.json", "goldens/../../canary", "a\x7fb", "//etc/passwd"]
    assert (
        set(older) <= set(HOSTILE_PATHS)
        and len(HOSTILE_PATHS) >= 25
        and not set(PLAIN_PATHS) & set(HOSTILE_PATHS)
    )
    assert all(case["reason"] for case in PATH_CASES["refuse"] + PATH_CASES["accept"])


@pytest.mark.parametrize("path", PLAIN_PATHS)
def test_plain_manifest_paths_are_accepted(path: str) -> None:
    assert plain_parts(path) == tuple(path.split("/"))


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_manifest_paths_that_are_not_plain_are_refused(export: Path, path: str) -> None:
    _add_entry(export, path)
    with pytest.raises(ManifestError, match="not a plain relative path"):
        ExportFolder.open(export)


def test_the_tokenizer_as_a_link_out_of_the_folder_is_never_read(export: Path, canary: Canary) -> None:
    (export / "tokenizer.json").unlink()
    os.symlink(canary.path, export / "tokenizer.json")
    _fails(export, "symbolic link")
    assert canary.untouched()


def test_a_hard_link_to_a_file_outside_is_never_read(export: Path, canary: Canary) -> None:
    shutil.copyfile(export / "tokenizer.json", canary.path)
    os.utime(canary.path, (1_000_000, 2_000_000))
    (export / "tokenizer.json").unlink()
    os.link(canary.path, export / "tokenizer.json")  # same bytes: only the link count gives it away
    _fails(export, "hard links")
    assert canary.untouched()


def test_a_folder_on_the_way_that_is_a_link_is_refused(export: Path, tmp_path: Path, canary: Canary) -> None:
    outside = tmp_path / "outside-goldens"
    shutil.move(export / "goldens", outside)
    os.symlink(outside, export / "goldens")
    with pytest.raises(ManifestError, match="symbolic link"):
        ExportFolder.open(export).verify()
    assert canary.untouched()


def test_the_manifest_as_a_link_is_refused(export: Path, tmp_path: Path) -> None:
    real = tmp_path / "manifest-outside.json"
    shutil.move(export / "manifest.json", real)
    os.symlink(real, export / "manifest.json")
    with pytest.raises(ManifestError, match="symbolic link"):
        ExportFolder.open(export)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "folder"])
def test_special_files_are_refused_without_hanging(export: Path, kind: str) -> None:
    target = export / "tokenizer.json"
    target.unlink()
    if kind == "fifo":
        os.mkfifo(target)  # a blocking open would wait for a writer forever
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(target))
    elif kind == "device":
        try:
            os.mknod(target, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero: endless bytes
        except PermissionError:
            pytest.skip("creating a device file needs CAP_MKNOD")
    else:
        target.mkdir()
    _fails(export, "not a regular file")


@pytest.mark.timeout(30)
def test_the_manifest_as_a_fifo_does_not_hang(export: Path) -> None:
    (export / "manifest.json").unlink()
    os.mkfifo(export / "manifest.json")
    with pytest.raises(ManifestError, match="FIFO"):
        ExportFolder.open(export)


def test_huge_files_are_refused_unread(export: Path) -> None:
    with open(export / "tokenizer.json", "r+b") as handle:
        handle.truncate(1 << 40)  # a sparse terabyte: reading it would never end
    _fails(export, "truncated or altered")
    with open(export / "manifest.json", "r+b") as handle:
        handle.truncate(1 << 40)
    with pytest.raises(ManifestError, match="more than the"):
        ExportFolder.open(export)


@pytest.mark.parametrize(
    "text", ["[" * 100_000, '{"format_version": 1' + "0" * 5000 + "}", '"\\ud800"', "{}"]
)
def test_malformed_manifests_are_typed_errors(export: Path, text: str) -> None:
    (export / "manifest.json").write_text(text)
    with pytest.raises(ManifestError):
        ExportFolder.open(export)


# External data: a tensor added to a serialized ModelProto with the runtime's protobuf field writer.


def _external_tensor(location: str, *, entries: bool = True, flag: bool = True) -> bytes:
    """TensorProto{dims: 4, data_type: FLOAT, name: "w", external_data: {location}, data_location}."""
    tensor = protobuf.field(1, 4) + protobuf.field(2, 1) + protobuf.field(8, b"w")
    if entries:
        tensor += protobuf.field(13, protobuf.field(1, b"location") + protobuf.field(2, location.encode()))
    if flag:
        tensor += protobuf.field(14, 1)
    return tensor


@pytest.mark.parametrize(
    "extra",
    [
        protobuf.field(
            7, protobuf.field(5, _external_tensor("canary.bin"))
        ),  # an initializer, merged into the graph
        protobuf.field(
            7, protobuf.field(5, _external_tensor("*/_ORT_MEM_ADDR_/*"))
        ),  # ONNX Runtime's memory marker
        protobuf.field(7, protobuf.field(5, _external_tensor("x", entries=False))),  # data_location alone
        protobuf.field(
            7, protobuf.field(5, _external_tensor("x", flag=False))
        ),  # external_data entries alone
        # a Constant node's tensor attribute, and a tensor inside an If node's subgraph
        protobuf.field(
            7, protobuf.field(1, protobuf.field(5, protobuf.field(5, _external_tensor("canary.bin"))))
        ),
        protobuf.field(
            7,
            protobuf.field(
                1, protobuf.field(5, protobuf.field(6, protobuf.field(5, _external_tensor("canary.bin"))))
            ),
        ),
        protobuf.field(
            25, protobuf.field(7, protobuf.field(5, protobuf.field(5, _external_tensor("canary.bin"))))
        ),  # in a function
    ],
)
def test_onnx_external_data_is_refused(export: Path, extra: bytes) -> None:
    model = export / "encoder.onnx"
    model.write_bytes(model.read_bytes() + extra)  # protobuf merges a repeated message field
    _rehash(export, "encoder.onnx")
    _fails(export, "external")


def test_the_reference_models_use_no_external_data_and_garbage_is_refused() -> None:
    for family in ("gpt", "bert", "t5"):
        folder = ExportFolder.open(EXPORTED / family)
        for entry in folder.manifest.files:
            if entry.path.endswith(".onnx"):
                refuse_external_data(folder.read(entry.path), name=entry.path)
    for garbage in (b"\xff" * 20, protobuf.field(7, b"\x0f"), b"\x0a\x80"):
        with pytest.raises(ManifestError, match="not a valid ONNX model"):
            refuse_external_data(garbage, name="x.onnx")


# Probing in a child process.


def test_probe_of_a_good_export_is_ok_and_load_untrusted_works() -> None:
    result = probe_export(EXPORTED / "bert")
    assert result.ok and not result.harmful, result
    assert "ran one tiny request" in result.detail
    model = load(EXPORTED / "bert", device="cpu", untrusted=True)
    assert model.embed("a").shape == (model.dim,)


def test_probe_reports_errors_memory_and_time_limits(export: Path) -> None:
    (export / "tokenizer.json").write_bytes(b"{}")
    _rehash(export, "tokenizer.json")
    result = probe_export(export)
    assert result.status == "error" and "tokenizer" in result.detail, result
    assert probe_export(EXPORTED / "t5", memory_mb=64).status == "out_of_memory"
    timed = probe_export(EXPORTED / "t5", timeout_s=0.05)
    assert timed.status == "timed_out" and timed.harmful


@pytest.fixture
def crashing_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's child replaced by one that dies of SIGSEGV, as ONNX Runtime would on a bad model."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nkill -SEGV $$\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))


def test_a_crash_kills_the_probe_not_the_caller(crashing_python: None) -> None:
    result = probe_export(EXPORTED / "bert")
    assert result.status == "crashed" and result.signal == 11 and "SIGSEGV" in result.detail
    with pytest.raises(ManifestError, match="failed the untrusted probe"):
        load(EXPORTED / "bert", device="cpu", untrusted=True)


def test_untrusted_cli_stops_on_a_crash_and_runs_after_a_clean_probe(crashing_python: None) -> None:
    for command in ("inspect", "verify"):
        result = runner.invoke(app, [command, str(EXPORTED / "bert"), "--untrusted"])
        assert result.exit_code == 1 and "crashed" in result.stderr, result.output
        assert "Traceback" not in result.output


def test_untrusted_cli_on_a_good_export() -> None:
    result = runner.invoke(app, ["inspect", str(EXPORTED / "bert"), "--untrusted", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["probe"]["status"] == "ok"
    result = runner.invoke(app, ["verify", str(EXPORTED / "gpt"), "--untrusted"])
    assert result.exit_code == 0, result.output


@pytest.mark.timeout(60)
def test_inspecting_a_fifo_named_onnx_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    for flags in ([], ["--untrusted"]):
        result = runner.invoke(app, ["inspect", str(fifo), *flags])
        assert result.exit_code == 1 and "FIFO" in result.stderr, result.output
    assert probe_export(fifo).status == "error"
