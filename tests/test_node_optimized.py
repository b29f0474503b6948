"""The Node host on `onnxformer optimize` folders (fused graphs, int8 weights, the in-place KV cache of
builder/optimize/cache.py), on both of its engines: onnxruntime-node ("native", which binds the cache as
pre-allocated outputs written in place) and onnxruntime-web's WebAssembly ("wasm", the browser's engine,
which runs the same graph unbound). Every golden passes, and greedy and seeded generation give the
Python runtime's tokens, prompts that fill the context included. Node runs through
hosts/node/bin/verify.js, hosts/node/tests/sampling_driver.js and hosts/node/tests/decode_driver.js.

int8 folders are compared with Python one row at a time: their MatMuls quantize activations dynamically,
per tensor, so a row's tokens in a Python batch depend on the other rows (measured: 2 of 5 greedy rows of
the tiny GPT differ from their 15th or 16th token), and the Node host runs each row alone.
"""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from onnxformer.runtime import load
from onnxformer.runtime.folder import ExportFolder

ROOT = Path(__file__).resolve().parents[1]
NODE_HOST = ROOT / "hosts" / "node"
EXPORTED = ROOT / "exported"
ENGINES = ("native", "wasm")


def node(arguments: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    binary = shutil.which("node")
    assert binary, "Node.js is not installed; the host's tests need it (README: set-up)"
    assert (NODE_HOST / "node_modules").is_dir(), "run `make node-deps` first (npm ci in hosts/node)"
    return subprocess.run(
        [binary, *arguments], cwd=NODE_HOST, input=stdin, capture_output=True, text=True, timeout=300
    )


def driver(script: str, request: dict) -> dict:
    done = node([f"tests/{script}"], json.dumps(request))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def optimized(source: Path, out: Path, *, quantize: str | None = None) -> Path:
    """What `optimize` writes, without a Python start-up per folder."""
    from onnxformer.builder.optimize import optimize_export

    optimize_export(source, out, quantize=quantize, tasks=False)
    return out


@pytest.fixture(scope="module")
def gpt_folders(optimized_gpt: dict[str, Path]) -> dict[str, Path]:
    """Variant ("fused", "int8", "int4") -> the committed tiny GPT optimised (in-place cache, optimize's
    default): tests/conftest.py's, shared with the C and browser hosts' tests."""
    for folder in optimized_gpt.values():
        assert ExportFolder.open(folder).manifest.kv_cache.in_place
    return optimized_gpt


def expected_checks(folder: Path) -> int:
    """The checks `verify.js` runs on `folder`: one per graph output per case, tokenizer text, greedy
    prompt and embedding of its goldens."""
    manifest = json.loads((folder / "manifest.json").read_text())
    goldens = manifest["goldens"]
    count = sum(len(case["outputs"]) for graph in goldens["graphs"] for case in graph["cases"])
    if goldens.get("end_to_end"):
        end_to_end = json.loads((folder / goldens["end_to_end"]).read_text())
        count += len(end_to_end.get("tokenizer", [])) + len(end_to_end.get("greedy", []))
        count += len((end_to_end.get("embeddings") or {}).get("items", []))
    return count


def verify_on_both_engines(folder: Path) -> dict[str, list[dict]]:
    """engine -> verify.js's results on `folder`, each checked: all passed, none left out."""
    done = node(["bin/verify.js", str(folder), "--engine", "all", "--json"])
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-2000:])
    reports = {report["engine"]: report["results"] for report in json.loads(done.stdout)}
    assert set(reports) == set(ENGINES)
    manifest = ExportFolder.open(folder).manifest
    decoder_cases = {
        case.label
        for graph in manifest.goldens.graphs
        for case in graph.cases
        if graph.file == "decoder.onnx"
    }
    for engine, results in reports.items():
        graphs = [result for result in results if result["check"] == "graph"]
        worst = max(result["maxAbsDiff"] / result["allowed"] for result in graphs)
        greedy = sum(result["check"] == "greedy" for result in results)
        print(f"{folder.name} on {engine}: {len(results)} checks passed ({len(graphs)} graph outputs, "
              f"{greedy} greedy), largest difference {worst:.0%} of its allowance")  # fmt: skip
        assert len(results) == expected_checks(folder)
        assert {result["label"] for result in graphs if result["file"] == "decoder.onnx"} == decoder_cases
    return reports


@pytest.mark.parametrize("variant", ["fused", "int8", "int4"])
def test_every_golden_passes_on_both_engines(gpt_folders: dict[str, Path], variant: str) -> None:
    reports = verify_on_both_engines(gpt_folders[variant])
    if variant == "fused":  # quantized folders drop the end-to-end goldens (exact fp32 PyTorch tokens)
        assert all(sum(r["check"] == "greedy" for r in results) > 0 for results in reports.values())


@pytest.mark.parametrize("engine", ENGINES)
def test_the_native_engine_writes_the_cache_in_place(gpt_folders: dict[str, Path], engine: str) -> None:
    """Step by step beside the plain export: the same logits and cache; the positions after those written
    stay zero; natively every step writes into the buffers made before the first (no copy), in WebAssembly
    each step's presents (copies) are the next pasts."""
    got = driver(
        "decode_driver.js",
        {"op": "steps", "bound": str(gpt_folders["fused"]), "plain": str(EXPORTED / "gpt"), "engine": engine,
         "ids": [1, 9, 12, 30, 5], "steps": 6},
    )  # fmt: skip
    assert got["bindsOutputs"] == (engine == "native")
    worst = max(max(step["logits"], step["cache"]) for step in got["steps"])
    print(f"{engine}: in-place vs plain cache, max abs diff {worst:.2e} over {len(got['steps'])} steps")
    assert worst < 1e-4
    assert all(step["untouched"] for step in got["steps"])
    assert all(step["sameBuffers"] == (engine == "native") for step in got["steps"])


def gpt_rows(vocab: int, max_len: int, bos: int) -> list[list[int]]:
    """Prompts of several lengths: short ones, one with a few positions left, one that fills the context
    (one token can still be generated: it needs no position)."""

    def ids(count: int, stride: int) -> list[int]:
        return [(stride * i) % (vocab - 10) + 5 for i in range(count)]

    return [
        [bos, 9, 12, 30],
        [bos, 44],
        [bos, *ids(40, 7)],
        [bos, *ids(max_len - 3, 3)],
        [bos, *ids(max_len - 1, 11)],
    ]


def compare_generation(folder: Path, *, per_row: bool, engines: tuple[str, ...] = ENGINES) -> None:
    """Greedy (budget past the context, stop tokens off and on), seeded sampling and streamed text in Node,
    on both engines, equal to the Python runtime's on the same folder (`per_row`: each row as its own
    Python call, else one batch)."""
    manifest = json.loads((folder / "manifest.json").read_text())
    config, special = manifest["config"], manifest["special_tokens"]
    rows = gpt_rows(config["vocab_size"], config["max_len"], special["bos"])
    model = load(folder, device="cpu")

    def python(**options) -> list[list]:
        batches = [[row] for row in rows] if per_row else [rows]
        return [
            [g.tokens, g.finish_reason] for batch in batches for g in model.generate_ids(batch, **options)
        ]

    greedy = {"temperature": 0.0, "max_new_tokens": 2 * config["max_len"]}
    sampled = {"temperature": 0.9, "top_k": 20, "top_p": 0.9, "seed": 7, "max_new_tokens": 40}
    calls = [(greedy | {"stop_tokens": []}), greedy, sampled]
    expected = [python(**options) for options in calls]
    prompts = ["the cat", "a teacher finds the old book"]
    texts = [model.generate(prompt, temperature=0.8, seed=3, max_new_tokens=30) for prompt in prompts]
    pieces = list(model.stream(prompts[1], temperature=0.0, max_new_tokens=20))
    names = {"temperature": "temperature", "top_k": "topK", "top_p": "topP", "seed": "seed",
             "max_new_tokens": "maxNewTokens", "stop_tokens": "stopTokens"}  # fmt: skip
    request_calls = [
        {"method": "generateIds", "input": rows, "options": {names[k]: v for k, v in options.items()}}
        for options in calls
    ]
    request_calls += [
        {
            "method": "generate",
            "input": prompts,
            "options": {"temperature": 0.8, "seed": 3, "maxNewTokens": 30},
        },
        {"method": "stream", "input": prompts[1], "options": {"temperature": 0, "maxNewTokens": 20}},
    ]
    for engine in engines:
        got = driver("sampling_driver.js", {"op": "generate", "dir": str(folder), "engine": engine,
                                            "calls": request_calls})["results"]  # fmt: skip
        lengths = [len(result["tokens"]) for result in got[0]]
        print(f"{folder.name} on {engine}: greedy rows of {[len(row) for row in rows]} tokens gave {lengths}")
        assert lengths[-1] == 1 and got[0][-1]["finishReason"] == "length"  # the full context
        for index, want in enumerate(expected):
            assert [[r["tokens"], r["finishReason"]] for r in got[index]] == want, (engine, calls[index])
        assert got[3] == texts and got[4] == pieces, engine


@pytest.mark.parametrize("variant", ["fused", "int8", "int4"])
def test_generation_equals_pythons(gpt_folders: dict[str, Path], variant: str) -> None:
    # int4 on WebAssembly runs another MatMulNBits kernel than native x86 (which quantizes activations to
    # int8 at accuracy level 4): its goldens pass there (above), but its greedy tokens part from Python's
    # once two logits come close (after 18 tokens here), so only the native engine's are compared.
    engines = ("native",) if variant == "int4" else ENGINES
    compare_generation(gpt_folders[variant], per_row=variant != "fused", engines=engines)


@pytest.mark.parametrize("name", ["llama", "mistral"])
def test_imported_grouped_query_models(hf_exports, tmp_path: Path, name: str) -> None:
    """Llama (rotary positions as RotaryEmbedding, 2 KV heads for 4 query heads) and Mistral (a sliding
    window of 8 keys in GroupQueryAttention's bias), optimised with the in-place cache: goldens, and
    Python's tokens, on both engines."""
    _, export = hf_exports[name]
    folder = optimized(export, tmp_path / "fused")
    assert ExportFolder.open(folder).manifest.kv_cache.in_place
    verify_on_both_engines(folder)
    compare_generation(folder, per_row=False)


def test_optimised_encoders_and_seq2seq_pass_their_goldens(tmp_path: Path) -> None:
    """BERT (fused attention) and T5 (fused attention, a cache passed in and out: an encoder-decoder keeps
    the plain cache contract), fp32 and int8."""
    for family in ("bert", "t5"):
        for quantize in (None, "int8"):
            folder = optimized(
                EXPORTED / family, tmp_path / f"{family}-{quantize or 'fp32'}", quantize=quantize
            )
            verify_on_both_engines(folder)
