"""The virtual environments the tools run in, and the worker processes the orchestrator talks to.

Each tool runs in a worker subprocess (worker.py) in its own environment: Optimum pins transformers < 4.58
and onnxruntime-genai's model builder needs transformers 5, so they cannot share one with each other.
llama.cpp's worker runs in .venv-genai with llama-cpp-python's ctypes bindings from the unpacked sources
and the libraries `make llamacpp` built (benchmarks/peers/llamacpp.py).
"""

import json
import os
import select
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.peers.llamacpp import CHECKOUT, LLAMACPP_BIN, LLAMACPP_DIR, LLAMACPP_INFO
from onnxformer.runtime.errors import ConfigError

WORKER = Path(__file__).resolve().parent / "worker.py"
REPLY_TIMEOUT_S = (
    900  # the longest request (a build-free load, or one timed call of 2,000 sentences) is ~2 min
)


@dataclass(frozen=True)
class Env:
    venv: str  # relative to the checkout
    stamp: str  # relative to the checkout: the file its make target writes once everything is built
    target: str  # the make target that builds it
    what: str
    environ: dict[str, str] = field(default_factory=dict)  # more variables for its workers

    @property
    def python(self) -> Path:
        return CHECKOUT / self.venv / "bin" / "python"

    def check(self) -> None:
        if not self.python.is_file() or not (CHECKOUT / self.stamp).is_file():
            every = "" if self.target == "peers-venvs" else " (or `make peers-venvs` for all of them)"
            raise ConfigError(
                f"the peers' environment {self.venv} ({self.what}) is missing or incomplete; build it with "
                f"`make {self.target}`{every}, then run again"
            )


ENVS = {
    "ours": Env(
        ".venv", ".venv/.installed", "setup", "onnxformer, PyTorch, transformers 5, sentence-transformers"
    ),
    "optimum": Env(
        ".venv-optimum", ".venv-optimum/.peers-installed", "peers-venvs", "Optimum, sentence-transformers 5.1"
    ),
    "genai": Env(
        ".venv-genai", ".venv-genai/.installed", "genai-venv", "onnxruntime-genai and its model builder"
    ),
    "llamacpp": Env(
        ".venv-genai",
        str(LLAMACPP_INFO.relative_to(CHECKOUT)),
        "llamacpp",
        "llama.cpp built from llama-cpp-python's sources, and its ctypes bindings",
        # The bindings from the unpacked sources, on the libraries built beside them (the variable
        # llama_cpp/llama_cpp.py reads in place of its own lib/ folder).
        {"PYTHONPATH": str(LLAMACPP_DIR / "src"), "LLAMA_CPP_LIB_PATH": str(LLAMACPP_BIN)},
    ),
}


class WorkerError(RuntimeError):
    """A worker answered a request with an error, or died."""


class Worker:
    """One tool's worker process; requests are answered in order, one at a time."""

    def __init__(self, name: str, env: Env, *, threads: int, log: Path) -> None:
        self.name = name
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        environment = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",  # every model is a local folder: never reach for the hub
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "OMP_NUM_THREADS": str(threads),
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
        }
        environment.pop("PYTHONPATH", None)
        environment.pop("PYTHONSAFEPATH", None)  # the worker imports its tool_*.py from its own folder
        environment.update(env.environ)
        self._log = log.open("w")
        self.process = subprocess.Popen(
            [str(env.python), str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=environment,
            cwd=CHECKOUT,
        )

    def request(self, op: str, **fields) -> dict:
        if self.process.poll() is not None:
            raise WorkerError(f"{self.name}: the worker exited ({self.process.returncode}); see {self.log}")
        self.process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], REPLY_TIMEOUT_S)
        if not ready:  # a hung tool: stop it, so the run goes on without it
            self.process.kill()
            self.process.wait()
            raise WorkerError(f"{self.name}: no answer to {op!r} in {REPLY_TIMEOUT_S} s; see {self.log}")
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            raise WorkerError(f"{self.name}: the worker died ({self.process.returncode}): {self._tail()}")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise WorkerError(f"{self.name}: {reply.get('error')}")
        return reply

    def time(self, key: str, inner: int) -> float:
        return float(self.request("time", key=key, inner=inner)["ms"])

    def _tail(self) -> str:
        self._log.flush()
        lines = self.log.read_text(errors="replace").strip().splitlines()
        return " | ".join(lines[-3:]) or f"nothing in {self.log}"

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.process.stdin.flush()
                self.process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._log.close()


def env_versions(env: Env) -> dict:
    """Every package installed in the environment (name -> version), from its own interpreter."""
    code = (
        "import json, importlib.metadata as m; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    out = subprocess.run([str(env.python), "-c", code], capture_output=True, text=True, check=True).stdout
    return dict(sorted(json.loads(out).items(), key=lambda item: item[0].lower()))
