"""Kill the writer of an export folder or a training checkpoint at random moments and at every step.

Two versions of one artifact, A and B, are read into memory once. A forked child then rewrites the target
folder with the real write path (`write_export_folder` for exports; `write_folder_atomically` with the
arguments `save_checkpoint` passes for checkpoints, whose bytes are precomputed so no torch is needed)
and is killed with SIGKILL:

- `--random N`: N times, after a random delay while the child rewrites A and B in turn;
- `--points`: before every system call of one write of B over A, in turn (the child counts its calls
  into the os module and file methods with a profile hook and kills itself at the k-th; k runs from 1
  until a write finishes unkilled).

After every kill the target must hold exactly A or B, byte for byte (and, for an export, pass
`ExportFolder.open(target).verify()`), and every hidden folder a killed write left beside it that passes
verification (an export whose manifest and files verify; a checkpoint whose `checkpoint.json` marker
reads as JSON) must also be exactly A or B: no partial folder passes. Prints one JSON object.

    python scripts/kill_writes.py export exported/bert exported/gpt --random 20 --points
    python scripts/kill_writes.py checkpoint runs/a runs/b --random 20

Runs without torch: `write_export_folder` is loaded from its file, not through the builder's export
package (which imports torch).
"""

import argparse
import importlib.util
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from onnxformer.builder.atomic import write_folder_atomically
from onnxformer.runtime.errors import OnnxformerError
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.manifest import MANIFEST_NAME, Manifest

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT_MARKER = "checkpoint.json"  # onnxformer.builder.training.checkpoint.CHECKPOINT_NAME


def _write_export_folder():
    """`onnxformer.builder.export.folder.write_export_folder`, loaded without the package's torch."""
    spec = importlib.util.spec_from_file_location("_export_folder", ROOT / "builder" / "export" / "folder.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_export_folder


def export_version(folder: Path, *, goldens: bool) -> tuple[dict[str, bytes], Manifest]:
    """The files of an export (optionally without its goldens) and its manifest."""
    manifest = ExportFolder.open(folder).manifest
    data = json.loads((folder / MANIFEST_NAME).read_text())
    if not goldens and data.get("goldens") is not None:
        golden_files = {entry["path"] for entry in data["files"] if entry["path"].startswith("goldens/")}
        data["files"] = [entry for entry in data["files"] if entry["path"] not in golden_files]
        data["goldens"] = None
        manifest = Manifest.from_json(json.dumps(data))
    files = {entry.path: (folder / entry.path).read_bytes() for entry in manifest.files}
    return files, manifest


def checkpoint_version(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


class Campaign:
    def __init__(self, kind: str, a: Path, b: Path, work: Path, *, goldens: bool) -> None:
        self.kind = kind
        self.target = work / "artifact"
        if kind == "export":
            write = _write_export_folder()
            versions = [export_version(a, goldens=goldens), export_version(b, goldens=goldens)]
            self.writers = [lambda v=v: write(self.target, *v) for v in versions]
            self.expected = [{**files, MANIFEST_NAME: m.to_json().encode()} for files, m in versions]
        else:
            self.expected = [checkpoint_version(a), checkpoint_version(b)]
            self.writers = [
                lambda files=files: write_folder_atomically(
                    self.target, files, marker=CHECKPOINT_MARKER, error=OnnxformerError, what="checkpoint"
                )
                for files in self.expected
            ]
        self.kills = 0
        self.problems: list[str] = []
        self.leftovers = 0

    def check(self, when: str) -> None:
        """The target is exactly A or B (and verifies); leftovers that pass verification are whole too."""
        if not self.target.is_dir():
            self.problems.append(f"{when}: the target folder is missing")
        else:
            found = tree(self.target)
            if found not in self.expected:
                self.problems.append(f"{when}: the target is neither version ({len(found)} files)")
            elif self.kind == "export":
                try:
                    ExportFolder.open(self.target).verify()
                except OnnxformerError as error:
                    self.problems.append(f"{when}: the target does not verify: {error}")
        for left in self.target.parent.iterdir():
            if left == self.target:
                continue
            self.leftovers += 1
            if self._passes(left) and tree(left) not in self.expected:
                self.problems.append(f"{when}: the partial folder {left.name} passes verification")
            shutil.rmtree(left, ignore_errors=True)

    def _passes(self, folder: Path) -> bool:
        if self.kind == "checkpoint":  # what read_checkpoint_meta requires: the marker, as JSON
            try:
                json.loads((folder / CHECKPOINT_MARKER).read_text())
            except (OSError, ValueError):
                return False
            return True
        try:
            ExportFolder.open(folder).verify()
        except OnnxformerError:
            return False
        return True

    def reset(self) -> None:
        shutil.rmtree(self.target, ignore_errors=True)
        self.writers[0]()

    def random_kills(self, rounds: int, max_delay: float, rng: random.Random) -> None:
        self.reset()
        for index in range(rounds):
            pid = os.fork()
            if pid == 0:  # the writer: A, B, A, ... until killed
                try:
                    turn = index
                    while True:
                        self.writers[turn % 2]()
                        turn += 1
                finally:
                    os._exit(1)
            time.sleep(rng.uniform(0, max_delay))
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            self.kills += 1
            self.check(f"random kill {index + 1}")

    def point_kills(self, stride: int = 1) -> int:
        """Kill one write of B over A at its k-th system call, k = 1, 1 + stride, ...; the number of
        points there were."""
        point = 1
        while True:
            self.reset()
            pid = os.fork()
            if pid == 0:
                _kill_at_system_call(point)
                try:
                    self.writers[1]()
                finally:
                    sys.setprofile(None)
                    os._exit(0)
            _, status = os.waitpid(pid, 0)
            if not os.WIFSIGNALED(status):  # the write finished: every point was tried
                self.check("the unkilled write")
                return point - 1
            self.kills += 1
            self.check(f"kill at system call {point}")
            point += stride


_IO_METHODS = frozenset({"open", "write", "flush", "close", "read"})


def _kill_at_system_call(point: int) -> None:
    """SIGKILL this process just before its `point`-th call into the os module or a file method (what
    reaches the kernel: open, write, fsync, mkdir, rename, unlink, ...), counted with a profile hook."""
    calls = 0

    def profile(frame, event, arg) -> None:
        nonlocal calls
        if event != "c_call":
            return
        if getattr(arg, "__module__", None) == "posix" or getattr(arg, "__name__", "") in _IO_METHODS:
            calls += 1
            if calls == point:
                os.kill(os.getpid(), signal.SIGKILL)

    sys.setprofile(profile)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["export", "checkpoint"])
    parser.add_argument("a", type=Path, help="version A: an export or checkpoint folder")
    parser.add_argument("b", type=Path, help="version B: the same kind of folder")
    parser.add_argument("--random", type=int, default=20, help="random kills (default 20)")
    parser.add_argument("--max-delay", type=float, default=0.3, help="longest delay before a kill, s")
    parser.add_argument("--points", action="store_true", help="also kill at every system call of a write")
    parser.add_argument("--stride", type=int, default=1, help="with --points: try every n-th call")
    parser.add_argument("--goldens", action="store_true", help="exports: keep the goldens (many files)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kill-writes-") as work:
        campaign = Campaign(args.kind, args.a, args.b, Path(work), goldens=args.goldens)
        start = time.monotonic()
        campaign.random_kills(args.random, args.max_delay, random.Random(args.seed))
        random_kills = campaign.kills
        points = campaign.point_kills(args.stride) if args.points else 0
        report = {
            "kind": args.kind,
            "random_kills": random_kills,
            "point_kills": campaign.kills - random_kills,
            "system_call_points": points,
            "kills": campaign.kills,
            "leftover_folders": campaign.leftovers,
            "corrupt": len(campaign.problems),
            "problems": campaign.problems[:20],
            "seconds": round(time.monotonic() - start, 1),
        }
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    sys.exit(1 if main()["corrupt"] else 0)
