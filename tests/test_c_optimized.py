"""The C host on folders written by `onnxformer optimize`: fused graphs, int8 weights and the in-place KV
cache (one buffer per layer bound as both past input and present output, which the step writes into). Every
golden passes and greedy generation gives the Python runtime's tokens, for prompts of every length up to the
context, on the reference GPT and on an imported Llama (grouped-query attention, rotary).

The C binary is the sanitized build of tests/test_c_host.py (`make -C hosts/c`).
"""

import json
import random
import re
from pathlib import Path

import pytest
from test_c_host import c_host_binary, run

from onnxformer.builder.optimize import optimize_export
from onnxformer.runtime import load

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"(\d+) files checked, (\d+) passed, (\d+) failed")


@pytest.fixture(scope="module")
def c_host() -> Path:
    return c_host_binary()


@pytest.fixture(scope="module")
def optimized(
    tmp_path_factory: pytest.TempPathFactory, hf_exports: dict[str, tuple[Path, Path]]
) -> dict[str, Path]:
    """name -> an optimised folder: the reference GPT fused (in-place cache) and fused + int8, an imported
    Llama fused."""
    root = tmp_path_factory.mktemp("optimized")
    folders = {
        "gpt-in-place": (ROOT / "exported" / "gpt", {}),
        "gpt-int8": (ROOT / "exported" / "gpt", {"quantize": "int8", "tasks": False}),
        "gpt-int4": (ROOT / "exported" / "gpt", {"quantize": "int4", "tasks": False}),
        "llama-in-place": (hf_exports["llama"][1], {"tasks": False}),
    }
    made = {}
    for name, (source, options) in folders.items():
        optimize_export(source, root / name, **options)
        layout = json.loads((root / name / "manifest.json").read_text())["kv_cache"]["layout"]
        assert layout == ["batch", "heads", "max_sequence", "head_dim"], (name, layout)
        made[name] = root / name
    return made


@pytest.mark.parametrize("name", ["gpt-in-place", "gpt-int8", "gpt-int4", "llama-in-place"])
def test_every_golden_passes(c_host: Path, optimized: dict[str, Path], name: str) -> None:
    result = run(c_host, "verify", str(optimized[name]))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    summary = SUMMARY.search(result.stdout)
    assert summary is not None and int(summary.group(3)) == 0 and int(summary.group(2)) > 0, result.stdout[
        -2000:
    ]
    decoder = [line for line in result.stdout.splitlines() if " graph decoder.onnx " in line]
    assert decoder and all(line.startswith("  ok") for line in decoder)
    print(f"C host, optimised {name}: {summary.group(2)} passed ({len(decoder)} of the in-place decoder)")


def _prompts(model, count: int, seed: int) -> list[list[int]]:
    """Framed prompts of lengths 1 to the whole context (the last leaves room for one new token)."""
    rng = random.Random(seed)
    prefix = model.frame("", what="prompt")
    lengths = sorted(
        {
            1,
            2,
            5,
            model.max_len // 2,
            model.max_len - 3,
            model.max_len,
            *[rng.randint(1, model.max_len) for _ in range(count)],
        }
    )
    words = list(range(3, model.tokenizer.vocab_size))
    return [(prefix + [rng.choice(words) for _ in range(length)])[:length] for length in lengths]


@pytest.mark.parametrize("name", ["gpt-in-place", "gpt-int8", "gpt-int4", "llama-in-place"])
def test_greedy_tokens_equal_python(c_host: Path, optimized: dict[str, Path], name: str) -> None:
    model = load(optimized[name], device="cpu")
    prompts = _prompts(model, 6, seed=len(name))
    for prompt in prompts:
        (want,) = model.generate_ids([prompt], temperature=0.0, max_new_tokens=24, stop_tokens=[])
        result = run(c_host, "generate", str(optimized[name]), "--ids", ",".join(map(str, prompt)),
                     "--max-new-tokens", "24", "--stop-tokens", "")  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        got = json.loads(result.stdout)
        assert (got["output_ids"], got["finish_reason"]) == (want.tokens, want.finish_reason), (
            name,
            len(prompt),
        )
    print(f"C host, optimised {name}: greedy tokens equal Python's for prompts of {len(prompts)} lengths")


def test_text_in_and_out_equals_python(c_host: Path, optimized: dict[str, Path]) -> None:
    folder = optimized["gpt-in-place"]
    model = load(folder, device="cpu")
    for prompt in ("the cat", "", "a dog sees the bird .", "Hello, world!"):
        want = model.generate(prompt, temperature=0.0)
        result = (
            run(c_host, "generate", str(folder), "--", prompt)
            if prompt
            else run(c_host, "generate", str(folder), "")
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert json.loads(result.stdout)["text"] == want, prompt
