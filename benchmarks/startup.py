"""Start-up cost of the runtime, measured in a fresh interpreter per run: the time to import
`onnxformer.runtime` (numpy, ONNX Runtime, tokenizers), the time to load an export (sha256 checks, session
creation with graph optimisation, tokenizer), the resident memory of that process afterwards (VmRSS) and at
its peak (VmHWM), and whether torch got imported along the way (it must not)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

_CHILD = """
import json, sys, time
start = time.perf_counter()
from onnxformer.runtime import load
imported = time.perf_counter()
model = load(sys.argv[1], device="cpu", threads=int(sys.argv[2]))
loaded = time.perf_counter()
model.generate_ids([[model.export.special["bos"]]], max_new_tokens=1, temperature=0.0)
first = time.perf_counter()
memory = {}
with open("/proc/self/status") as handle:
    for line in handle:
        if line.startswith(("VmRSS:", "VmHWM:")):
            memory[line.split(":")[0]] = int(line.split()[1]) / 1024
print(json.dumps({
    "import_s": imported - start, "load_s": loaded - imported, "first_token_s": first - loaded,
    "rss_mb": memory.get("VmRSS"), "peak_rss_mb": memory.get("VmHWM"), "torch_loaded": "torch" in sys.modules,
}))
"""


def measure_startup(folder: Path, *, threads: int, runs: int = 3) -> dict:
    """Medians over `runs` fresh interpreters (a GPT export: the child generates one token after loading)."""
    samples = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(folder), str(threads)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        samples.append(json.loads(done.stdout.strip().splitlines()[-1]))
    result = {
        key: round(float(np.median([s[key] for s in samples])), 3)
        for key in ("import_s", "load_s", "first_token_s", "rss_mb", "peak_rss_mb")
    }
    result["import_and_load_s"] = round(result["import_s"] + result["load_s"], 3)
    result["torch_loaded"] = any(s["torch_loaded"] for s in samples)
    result["runs"] = runs
    return result
