"""Training under torch.distributed (CPU, gloo, 2 processes on the loopback interface).

2 processes at B/2 rows each train the same model as 1 process at B (losses <= 1e-5 apart, whole-model
relative weight difference <= 1e-4), and a run stopped and resumed under 2 processes ends exactly where an
uninterrupted one does. Run as a script, this file is the worker torchrun starts in each process; every
worker checks that train() freed the process group before returning (no gloo thread left to be torn down
while the interpreter exits, which aborted rank 0 now and then).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from onnxformer.builder.training import TrainOptions, load_checkpoint, train
from onnxformer.builder.training.distributed import launch_command

TINY = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "max_len": 24, "dropout": 0.0}
RUN = {"steps": 12, "batch_size": 8, "eval_every": 6, "save_every": 4, "quality_samples": 0}
TIMEOUT = 600  # seconds; a hung process group fails the test instead of blocking the suite


def _options(family: str, **changes) -> TrainOptions:
    return TrainOptions(family, **{**RUN, "model_overrides": TINY, **changes})


def _torchrun(spec: dict, nproc: int = 2) -> None:
    """Run this file as the worker in `nproc` processes; fail with their output if any fails."""
    command = launch_command(nproc, "", [json.dumps(spec)])
    command[command.index("-m", 3) : command.index("-m", 3) + 2] = [__file__]  # a script, not a module
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=env, check=False)
    if done.returncode != 0:
        interesting = [line for line in done.stderr.splitlines() if "rror" in line or "terminate" in line]
        pytest.fail("\n".join(interesting[:30]) + "\n" + done.stderr[-2000:], pytrace=False)


def _spec(family: str, out: Path, **extra) -> dict:
    return {"family": family, "out": str(out), "options": {**RUN, "model_overrides": TINY}, **extra}


def _compare(one: Path, two: Path) -> tuple[float, float]:
    """(max abs difference of the per-step losses, whole-model relative weight difference)."""
    a = load_checkpoint(one, with_training_state=True)
    b = load_checkpoint(two, with_training_state=True)
    losses = max(abs(x - y) for x, y in zip(a.history["train_loss"], b.history["train_loss"], strict=True))
    wa, wb = a.training_state["model"], b.training_state["model"]
    flat_a = torch.cat([wa[k].flatten().double() for k in sorted(wa)])
    flat_b = torch.cat([wb[k].flatten().double() for k in sorted(wa)])
    return losses, float((flat_a - flat_b).norm() / flat_a.norm())


@pytest.fixture(scope="module")
def two_rank_gpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ddp") / "gpt2"
    _torchrun(_spec("gpt", out))
    return out


@pytest.mark.parametrize("family", ["gpt", "bert"])
def test_two_processes_at_half_batch_equal_one_at_full_batch(
    tmp_path: Path, family: str, two_rank_gpt: Path
) -> None:
    one = train(tmp_path / "one", _options(family)).out
    if family == "gpt":
        two = two_rank_gpt
    else:
        two = tmp_path / "two"
        _torchrun(_spec(family, two))
    saved = load_checkpoint(two, with_training_state=True)
    assert saved.extra["world_size"] == 2 and len(saved.training_state["rank_rng"]) == 2
    losses, weights = _compare(one, two)
    print(f"{family}: 2 ranks vs 1 process: max loss difference {losses:.2e}, relative weights {weights:.2e}")
    assert losses <= 1e-5 and weights <= 1e-4


def test_stop_and_resume_under_two_processes_is_exact(tmp_path: Path, two_rank_gpt: Path) -> None:
    out = tmp_path / "resumed"
    _torchrun(_spec("gpt", out, stop_after=7))
    assert load_checkpoint(out).step == 7
    _torchrun(_spec("gpt", out, resume=True))
    a = load_checkpoint(two_rank_gpt, with_training_state=True)
    b = load_checkpoint(out, with_training_state=True)
    worst = max(
        float((a.training_state["model"][k] - v).abs().max()) for k, v in b.training_state["model"].items()
    )
    print(f"2-process resume: max weight difference {worst}")
    assert all(torch.equal(a.training_state["model"][k], v) for k, v in b.training_state["model"].items())
    assert a.history == b.history


def test_fsdp_trains_the_same_model_as_ddp_and_saves_a_full_state_dict(
    tmp_path: Path, two_rank_gpt: Path
) -> None:
    out = tmp_path / "fsdp"
    spec = _spec("gpt", out)
    spec["options"]["fsdp"] = True
    _torchrun(spec)
    saved = load_checkpoint(out, with_training_state=True)  # loads into an unsharded model: a full state dict
    assert saved.extra["train_options"]["fsdp"]
    losses, weights = _compare(two_rank_gpt, out)
    print(f"fsdp vs ddp (2 ranks): max loss difference {losses:.2e}, relative weights {weights:.2e}")
    assert losses <= 1e-5 and weights <= 1e-4


def test_the_cli_launches_torchrun_with_nproc(tmp_path: Path) -> None:
    out = tmp_path / "cli"
    sizes = ["--d-model", "32", "--n-layers", "1", "--n-heads", "2", "--d-ff", "64", "--max-len", "24"]
    command = [sys.executable, "-c", "from onnxformer.cli.main import main; main()", "train", "gpt"]
    command += [
        "--nproc",
        "2",
        "--steps",
        "2",
        "--batch-size",
        "4",
        "--quality-samples",
        "0",
        "--out",
        str(out),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*command, *sizes], capture_output=True, text=True, timeout=TIMEOUT, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("gpt trained") == 1  # only rank 0 prints
    assert load_checkpoint(out).extra["world_size"] == 2
    odd = subprocess.run(
        [*command[:-2], "--batch-size", "5", "--out", str(tmp_path / "odd"), *sizes],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        check=False,
    )
    assert odd.returncode != 0 and "does not split evenly over 2 processes" in odd.stderr


def _gloo_threads() -> list[str]:
    """The names of this process's threads that gloo runs (its work queue and socket loops)."""
    names = []
    for task in Path("/proc/self/task").iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:  # a thread that ended meanwhile
            continue
    return sorted(name for name in names if "gloo" in name)


def _worker(spec: dict) -> None:
    options = TrainOptions(spec["family"], **spec["options"])
    train(spec["out"], options, resume=spec.get("resume", False), stop_after=spec.get("stop_after"))
    left = _gloo_threads()
    if left:  # the group would be freed during interpreter exit, where gloo's teardown can abort
        raise RuntimeError(f"train() returned with the process group still alive: gloo threads {left}")


if __name__ == "__main__":
    _worker(json.loads(sys.argv[1]))
