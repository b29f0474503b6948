"""The user's own files: onnxformer never deletes or replaces a file it did not write.

A folder output (an export, a checkpoint) is replaced, with --overwrite, only when it holds nothing but
what its manifest.json / checkpoint.json lists; a PNG only when onnxformer's mark is in it; the demo only
what its demo.json lists. A step that fails leaves the target as it was, and Ctrl-C in `train` says what
was kept.
"""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from onnxformer.builder.atomic import foreign_entries, staged_folder, write_folder_atomically
from onnxformer.builder.export.folder import write_export_folder
from onnxformer.cli.main import app
from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.manifest import Manifest

runner = CliRunner()
EXPORTED = Path(__file__).resolve().parents[1] / "exported"
TINY = ["--d-model", "32", "--n-layers", "1", "--n-heads", "2", "--d-ff", "64", "--batch-size", "8"]
TINY += ["--quality-samples", "0", "--vocab-size", "300", "--eval-every", "100"]


def _tree(folder: Path) -> dict[str, str]:
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _add_user_files(folder: Path) -> None:
    (folder / "notes.txt").write_text("keep me")
    (folder / "mydata").mkdir()
    (folder / "mydata" / "rows.csv").write_text("a,b\n")


def _manifest(folder: Path) -> Manifest:
    return Manifest.from_json((folder / "manifest.json").read_text(encoding="utf-8"))


def _siblings(folder: Path) -> list[str]:
    """What sits beside `folder`: a failed write must leave no staging folder behind."""
    return sorted(path.name for path in folder.parent.iterdir() if path != folder)


@pytest.fixture
def gpt_export(tmp_path: Path) -> Path:
    copy = tmp_path / "gpt-export"
    shutil.copytree(EXPORTED / "gpt", copy)
    return copy


@pytest.fixture
def checkpoint(tiny_checkpoints: dict[str, Path], tmp_path: Path) -> Path:
    copy = tmp_path / "gpt-run"
    shutil.copytree(tiny_checkpoints["gpt"], copy)
    return copy


# ---- folders: what the marker lists is ours, anything else is the user's ------------------------------


def test_foreign_entries_name_what_the_marker_does_not_list(tmp_path: Path) -> None:
    (tmp_path / "goldens").mkdir()
    for name in ("manifest.json", "model.onnx", "goldens/a.npz", "goldens/extra.txt", "notes.txt"):
        (tmp_path / name).write_text("x")
    (tmp_path / "mydata").mkdir()  # an empty folder of the user's counts too
    owned = frozenset({"manifest.json", "model.onnx", "goldens/a.npz"})
    assert foreign_entries(tmp_path, owned) == ["goldens/extra.txt", "mydata/", "notes.txt"]
    assert foreign_entries(tmp_path, owned | {"goldens/extra.txt", "notes.txt"}) == ["mydata/"]


def test_export_overwrite_refuses_a_folder_holding_user_files(gpt_export: Path, tmp_path: Path) -> None:
    """Before: `export ... --overwrite` swapped in a new folder and notes.txt and mydata/ were gone."""
    _add_user_files(gpt_export)
    before = _tree(gpt_export)
    result = runner.invoke(
        app, ["export", str(tmp_path / "no-checkpoint"), "--out", str(gpt_export), "--overwrite"]
    )
    assert result.exit_code == 1, result.output
    assert "it holds mydata/ and notes.txt, which onnxformer did not write" in result.stderr
    assert _tree(gpt_export) == before
    # The library refuses as well (the same check runs again just before the swap).
    manifest = _manifest(gpt_export)
    files = {entry.path: (gpt_export / entry.path).read_bytes() for entry in manifest.files}
    with pytest.raises(ExportError, match=r"holds mydata/ and notes\.txt"):
        write_export_folder(gpt_export, files, manifest)
    assert _tree(gpt_export) == before and _siblings(gpt_export) == []
    (gpt_export / "notes.txt").unlink()
    shutil.rmtree(gpt_export / "mydata")
    write_export_folder(gpt_export, files, manifest)  # only what the manifest lists: replaced
    assert _tree(gpt_export) == {k: v for k, v in before.items() if not k.startswith(("notes", "mydata"))}


def test_optimize_in_place_and_export_blocks_refuse_user_files(gpt_export: Path, blocks_copy: Path) -> None:
    (gpt_export / "notes.txt").write_text("keep me")
    result = runner.invoke(app, ["optimize", str(gpt_export), str(gpt_export)])
    assert result.exit_code == 1 and "holds notes.txt, which onnxformer did not write" in result.stderr
    (blocks_copy / "notes.txt").write_text("keep me")
    before = _tree(blocks_copy)
    again = runner.invoke(
        app, ["export-blocks", "--block", "ffn.gelu", "--out", str(blocks_copy), "--overwrite"]
    )
    assert again.exit_code == 1 and "holds notes.txt" in again.stderr
    assert _tree(blocks_copy) == before


def test_a_file_added_while_writing_stops_the_swap(tmp_path: Path) -> None:
    target = tmp_path / "out"
    listing = json.dumps({"files": [{"path": "a.bin"}]}).encode()
    write_folder_atomically(
        target,
        {"manifest.json": listing, "a.bin": b"one"},
        marker="manifest.json",
        error=ExportError,
        what="x",
    )

    class Files(dict):
        def __getitem__(self, key: str) -> bytes:  # the user saves a file there mid-write
            (target / "notes.txt").write_text("keep me")
            return super().__getitem__(key)

    with pytest.raises(ExportError, match=r"holds notes\.txt"):
        write_folder_atomically(
            target,
            Files({"manifest.json": listing, "a.bin": b"two"}),
            marker="manifest.json",
            error=ExportError,
            what="x",
        )
    assert (target / "a.bin").read_bytes() == b"one" and (target / "notes.txt").read_text() == "keep me"
    assert _siblings(target) == []


# ---- training: --overwrite, --resume, a file added mid-run, Ctrl-C -------------------------------------


def test_train_overwrite_and_resume_refuse_user_files(checkpoint: Path) -> None:
    """Before: `train --overwrite` (and each save of `--resume`) deleted notes.txt and mydata/."""
    _add_user_files(checkpoint)
    before = _tree(checkpoint)
    for flags in (["--overwrite"], ["--resume", "--steps", "40"]):
        result = runner.invoke(app, ["train", "gpt", "--out", str(checkpoint), *flags])
        assert result.exit_code == 1, result.output
        assert "holds mydata/ and notes.txt, which onnxformer did not write" in result.stderr
    assert _tree(checkpoint) == before
    listed = json.loads((checkpoint / "checkpoint.json").read_text())["files"]
    assert "model.safetensors" in listed and "training_state.pt" in listed


def test_a_checkpoint_from_before_the_file_list_is_still_ours(checkpoint: Path) -> None:
    """A checkpoint.json without "files" stands for the checkpoint's own file names, nothing else."""
    from onnxformer.builder.training.checkpoint import check_checkpoint_target

    meta = json.loads((checkpoint / "checkpoint.json").read_text())
    del meta["files"]
    (checkpoint / "checkpoint.json").write_text(json.dumps(meta))
    check_checkpoint_target(checkpoint)  # no error: every file is one a checkpoint holds
    (checkpoint / "notes.txt").write_text("keep me")
    result = runner.invoke(app, ["train", "gpt", "--out", str(checkpoint), "--overwrite"])
    assert result.exit_code == 1 and "holds notes.txt" in result.stderr


def test_a_file_added_during_training_is_kept_and_the_last_save_stands(tmp_path: Path) -> None:
    from onnxformer.builder.training import TrainOptions, train
    from onnxformer.builder.training.checkpoint import CheckpointError

    out = tmp_path / "run"
    overrides = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}
    options = TrainOptions(
        "gpt", steps=6, batch_size=8, save_every=2, eval_every=6, quality_samples=0, vocab_size=300,
        model_overrides=overrides,
    )  # fmt: skip

    def progress(step: int, total: int, loss: float, speed: float) -> None:
        if step == 3:
            (out / "notes.txt").write_text("keep me")  # after the save at step 2

    with pytest.raises(CheckpointError, match=r"holds notes\.txt"):
        train(out, options, progress=progress)
    assert (out / "notes.txt").read_text() == "keep me"
    assert json.loads((out / "checkpoint.json").read_text())["step"] == 2


def test_ctrl_c_in_train_says_what_was_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: Ctrl-C ended `train` with exit code 130 and not a word."""
    from onnxformer.cli.train import TrainingDisplay

    stop_at = {"step": 5}

    def interrupt(self, step: int, total: int, loss: float, speed: float) -> None:
        if step == stop_at["step"]:
            raise KeyboardInterrupt

    monkeypatch.setattr(TrainingDisplay, "__call__", interrupt)
    out = tmp_path / "run"
    args = ["train", "gpt", *TINY, "--steps", "8", "--save-every", "2", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 130, result.output
    assert f"interrupted: {out} keeps the checkpoint of step 4 of 8" in result.stderr
    assert f"onnxformer train gpt --out {out} --resume" in result.stderr
    stop_at["step"] = 1
    early = runner.invoke(app, [*args[:-1], str(tmp_path / "early")])
    assert early.exit_code == 130 and "no checkpoint was saved" in early.stderr, early.output


# ---- export --int8 that fails: nothing at --out --------------------------------------------------------


def test_a_failed_int8_export_writes_nothing(
    gpt_export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the fp32 export stayed at --out, and the rerun said the folder already held an export.

    The export step writes a committed export (a real one is minutes of this suite's budget) and the
    int8 step misses its quality bar, as a model with activation outliers does."""
    import onnxformer.builder.export.models as models
    import onnxformer.builder.optimize as optimize

    def export(checkpoint, out, **options):
        manifest = _manifest(EXPORTED / "gpt")
        files = {entry.path: (EXPORTED / "gpt" / entry.path).read_bytes() for entry in manifest.files}
        write_export_folder(out, files, manifest)
        return manifest

    seen = []

    def quality_miss(folder, out, **options) -> None:
        seen.append((Path(folder) / "manifest.json").is_file())  # the fp32 export, not yet at --out
        raise ExportError("decoder.onnx: int8 changes logits too much (cosine 0.9 < 0.99)")

    monkeypatch.setattr(models, "export_checkpoint", export)
    monkeypatch.setattr(optimize, "optimize_export", quality_miss)
    fresh = tmp_path / "fresh"
    args = ["export", str(tmp_path / "checkpoint"), "--int8", "--out"]
    for _ in range(2):  # the rerun fails the same way, not with "already holds an export"
        result = runner.invoke(app, [*args, str(fresh)])
        assert result.exit_code == 1 and "int8 changes logits too much" in result.stderr, result.output
        assert not fresh.exists() and _siblings(fresh) == ["gpt-export"]
    (gpt_export / "decoder.onnx").write_bytes(b"an earlier export")  # told apart from the one staged
    before = _tree(gpt_export)
    replaced = runner.invoke(app, [*args, str(gpt_export), "--overwrite"])
    assert replaced.exit_code == 1 and _tree(gpt_export) == before  # the previous export intact
    assert seen == [True, True, True]
    monkeypatch.setattr(optimize, "optimize_export", lambda folder, out, **options: _manifest(Path(out)))
    done = runner.invoke(app, [*args, str(gpt_export), "--overwrite"])
    assert done.exit_code == 0, done.output
    assert _tree(gpt_export) == _tree(EXPORTED / "gpt") and _siblings(gpt_export) == []


def test_staged_folder_keeps_the_target_when_a_step_fails(tmp_path: Path) -> None:
    target = tmp_path / "out"
    listing = json.dumps({"files": [{"path": "a.bin"}]}).encode()
    write = {"marker": "manifest.json", "error": ExportError, "what": "x"}
    write_folder_atomically(target, {"manifest.json": listing, "a.bin": b"one"}, **write)
    with pytest.raises(RuntimeError), staged_folder(target, **write) as staging:
        write_folder_atomically(staging, {"manifest.json": listing, "a.bin": b"two"}, **write)
        raise RuntimeError("the second step failed")
    assert (target / "a.bin").read_bytes() == b"one" and _siblings(target) == []
    with staged_folder(target, **write) as staging:
        write_folder_atomically(staging, {"manifest.json": listing, "a.bin": b"two"}, **write)
    assert (target / "a.bin").read_bytes() == b"two" and _siblings(target) == []


# ---- attention PNGs -----------------------------------------------------------------------------------


def test_attention_never_replaces_a_users_matplotlib_plot(tmp_path: Path) -> None:
    """Before: any PNG that matplotlib wrote counted as a heatmap and was replaced without --overwrite."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    plot = tmp_path / "myplot.png"
    figure = Figure()
    figure.subplots().plot([1, 2, 3])
    figure.savefig(plot, format="png")
    before = plot.read_bytes()
    for flags in ([], ["--overwrite"]):
        result = runner.invoke(
            app, ["attention", str(EXPORTED / "gpt"), "The cat sat.", "--out", str(plot), *flags]
        )
        assert result.exit_code == 1 and "onnxformer did not write it" in result.stderr, result.output
    assert plot.read_bytes() == before
    heatmap = tmp_path / "heat.png"
    made = runner.invoke(app, ["attention", str(EXPORTED / "gpt"), "The cat sat.", "--out", str(heatmap)])
    assert made.exit_code == 0 and f"heatmaps (2 layers x 4 heads): {heatmap}" in made.stdout


# ---- the demo -----------------------------------------------------------------------------------------


def test_demo_keeps_apart_from_a_users_runs(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: `demo --out runs --overwrite` (what `make run` passed) replaced runs/gpt of `train gpt`."""
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.move(checkpoint, runs / "gpt")  # `onnxformer train gpt` wrote it
    before = _tree(runs)
    result = runner.invoke(app, ["demo", "--out", str(runs), "--overwrite", "--steps", "1"])
    assert result.exit_code == 1 and f"refusing to replace {runs / 'gpt'}" in result.stderr, result.output
    assert "`onnxformer demo` did not write it" in result.stderr and _tree(runs) == before
    # By default the demo writes runs/demo, apart from runs/FAMILY where `train FAMILY` writes.
    monkeypatch.chdir(tmp_path)
    shutil.copytree(EXPORTED / "bert", runs / "demo" / "export" / "bert")
    default = runner.invoke(app, ["demo", "--steps", "1"])
    assert (
        default.exit_code == 1 and "runs/demo/export/bert: `onnxformer demo` did not write" in default.stderr
    )
    (runs / "demo" / "demo.json").write_text('{"my": "settings"}')
    mine = runner.invoke(app, ["demo", "--steps", "1", "--overwrite"])
    assert mine.exit_code == 1 and "refusing to replace runs/demo/demo.json" in mine.stderr
    assert (runs / "demo" / "demo.json").read_text() == '{"my": "settings"}'
