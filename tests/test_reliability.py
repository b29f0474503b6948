"""Nothing lost: writers killed with SIGKILL at random moments and at every system call leave the previous
export or checkpoint whole and no partial folder that passes verification; training killed and resumed
ends with the weights of an uninterrupted run; a checkpoint crafted to run code when unpickled never does.

The kills are made by scripts/kill_writes.py (also run, with more kills, by scripts/reliability.py).
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from onnxformer.builder.training import CheckpointError, TrainOptions, load_checkpoint, train

ROOT = Path(__file__).resolve().parents[1]
EXPORTED = ROOT / "exported"
TINY = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}


def _options(**changes) -> TrainOptions:
    values = {"steps": 12, "batch_size": 8, "save_every": 4, "eval_every": 6, "quality_samples": 4}
    return TrainOptions("gpt", **{**values, "model_overrides": TINY, **changes})


def _kill_writes(*args: str) -> dict:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "kill_writes.py"), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.stdout, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    print(json.dumps(report))
    return report


def test_killed_export_writes_leave_the_previous_export_whole() -> None:
    report = _kill_writes(
        "export", str(EXPORTED / "bert"), str(EXPORTED / "gpt"), "--random", "20", "--max-delay", "0.05",
        "--points", "--stride", "3",
    )  # fmt: skip
    assert report["random_kills"] >= 20 and report["point_kills"] >= 20
    assert report["corrupt"] == 0, report["problems"]


def test_killed_checkpoint_writes_leave_the_previous_checkpoint_whole(tmp_path: Path) -> None:
    a = train(tmp_path / "a", _options(steps=2)).out
    b = train(tmp_path / "b", _options(steps=3)).out
    assert load_checkpoint(a, with_training_state=True).step == 2  # both versions load
    assert load_checkpoint(b, with_training_state=True).step == 3
    report = _kill_writes("checkpoint", str(a), str(b), "--random", "20", "--max-delay", "0.05", "--points")
    assert report["random_kills"] >= 20 and report["point_kills"] >= 20
    assert report["corrupt"] == 0, report["problems"]


@pytest.mark.timeout(300)
def test_training_killed_at_a_random_moment_resumes_to_the_same_weights(tmp_path: Path) -> None:
    options = _options(steps=24, save_every=2)
    whole = train(tmp_path / "whole", options)
    killed = tmp_path / "killed"
    code = (
        "import sys\nfrom onnxformer.builder.training import TrainOptions, train\n"
        f"train(sys.argv[1], TrainOptions('gpt', **{_options_dict(options)!r}))\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(killed)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not (killed / "checkpoint.json").exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(random.Random().uniform(0, 0.3))
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL, "training ended before it could be killed"
    stopped_at = load_checkpoint(killed).step
    assert stopped_at < options.steps
    resumed = train(killed, options, resume=True)
    a = load_checkpoint(whole.out).model.state_dict()
    b = load_checkpoint(resumed.out).model.state_dict()
    print(f"killed after the checkpoint of step {stopped_at}; resumed to step {options.steps}")
    assert all(torch.equal(a[name], b[name]) for name in a)


def _options_dict(options: TrainOptions) -> dict:
    return {key: value for key, value in vars(options).items() if key != "family"}


def test_torch_file_with_a_code_payload_is_refused_and_never_runs(tmp_path: Path) -> None:
    out = train(tmp_path / "gpt", _options(steps=2)).out
    canary = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {canary}",))

    torch.save({"step": 2, "optimizer": Payload()}, out / "training_state.pt")  # a real torch zip file
    assert (out / "training_state.pt").read_bytes()[:2] == b"PK"
    with pytest.raises(CheckpointError, match="refused"):
        load_checkpoint(out, with_training_state=True)
    with pytest.raises(CheckpointError, match="refused"):
        train(out, _options(steps=4), resume=True)
    assert not canary.exists()


def test_staging_folders_of_dead_writers_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    from onnxformer.builder.atomic import write_folder_atomically
    from onnxformer.runtime.errors import ExportError

    def write(data: bytes) -> Path:
        files = {"manifest.json": b'{"files": [{"path": "a.bin"}]}', "a.bin": data}
        return write_folder_atomically(
            tmp_path / "out", files, marker="manifest.json", error=ExportError, what="x"
        )

    write(b"first")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    abandoned = tmp_path / f".out.tmp-{int(dead.stdout)}-abc"  # a writer killed mid-way, now gone
    live = tmp_path / f".out.tmp-{os.getppid()}-def"  # a running process's (our parent's) write in flight
    foreign = tmp_path / ".out.tmp-notes"  # not a name we make
    for folder in (abandoned, live, foreign):
        folder.mkdir()
        (folder / "a.bin").write_bytes(b"partial")
    write(b"second")
    assert not abandoned.exists() and live.is_dir() and foreign.is_dir()
    assert (tmp_path / "out" / "a.bin").read_bytes() == b"second"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".out.tmp-notes", live.name, "out"])
