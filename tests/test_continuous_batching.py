"""Continuous batching (`onnxformer.runtime.continuous.DecodeBatch`): generations that join a running
batch between steps, each with its own options, give the text each gives alone, on our GPT and on imported
decoders with grouped-query attention, sliding windows and soft-capping; a cancelled row leaves at once;
an export with an in-place cache is refused by name."""

from pathlib import Path

import pytest
from test_serving import EXPORTED

from onnxformer.runtime import ConfigError, load
from onnxformer.runtime.continuous import DecodeBatch
from onnxformer.runtime.generation_options import GenerationOptions

PROMPTS = ["The", "A", "Once", "The cat", "the dog chased", "An old", "Small", "The red ball under"]


def options(index: int) -> GenerationOptions:
    """A mix: greedy and seeded sampling, budgets from 3 to 22, stop strings on every third row."""
    sampled = index % 2 == 0
    return GenerationOptions(
        max_new_tokens=3 + (index * 7) % 20,
        temperature=0.8 if sampled else 0.0,
        top_k=20 if sampled else None,
        seed=index if sampled else None,
        stop=(" the",) if index % 3 == 0 else None,
    )


def run_staggered(
    model, prompts: list[str], every: int = 2
) -> tuple[dict[int, str], dict[int, str], list[int]]:
    """Two prompts join every `every` steps; returns each one's text and finish reason, and the batch size
    at each step."""
    batch, texts, reasons, sizes = DecodeBatch(model), {}, {}, []
    waiting, step = list(range(len(prompts))), 0
    while waiting or len(batch):
        rounds = []
        if waiting and step % every == 0:
            joining, waiting = waiting[:2], waiting[2:]
            rounds.append(
                batch.join([model.frame(prompts[i]) for i in joining], [options(i) for i in joining], joining)
            )
        sizes.append(len(batch))
        rounds.append(batch.step())
        for updates in rounds:
            for handle, update in updates.items():
                texts[handle] = texts.get(handle, "") + update.text
                if update.finish_reason is not None:
                    reasons[handle] = update.finish_reason
        step += 1
    return texts, reasons, sizes


def check_alone(model, prompts: list[str]) -> None:
    texts, reasons, sizes = run_staggered(model, prompts)
    wrong = [i for i, p in enumerate(prompts) if texts.get(i, "") != model.generate(p, options(i))]
    print(f"{len(prompts)} rows, batch sizes up to {max(sizes)}, mismatches {wrong}")
    assert not wrong and max(sizes) >= 3
    assert set(reasons) == set(range(len(prompts))) and set(reasons.values()) <= {"stop", "length"}


def test_joining_rows_generate_what_they_generate_alone_on_our_gpt() -> None:
    check_alone(load(EXPORTED / "gpt"), PROMPTS * 2)


@pytest.mark.parametrize("name", ["llama", "mistral", "gemma2", "qwen3"])
def test_joining_rows_generate_what_they_generate_alone_on_imported_decoders(
    hf_exports: dict[str, tuple[Path, Path]], name: str
) -> None:
    check_alone(load(hf_exports[name][1]), PROMPTS)


def test_a_cancelled_row_leaves_and_the_others_go_on() -> None:
    model = load(EXPORTED / "gpt")
    batch = DecodeBatch(model)
    long = GenerationOptions(max_new_tokens=40, temperature=1.0, seed=3, stop_tokens=())  # no early end
    updates = [batch.join([model.frame("The"), model.frame("A")], [long, long], ["a", "b"]), batch.step()]
    last = batch.cancel("a")
    assert last is not None and last.finish_reason == "cancelled" and len(batch) == 1
    assert batch.cancel("a") is None  # gone
    while len(batch):
        updates.append(batch.step())
    text = "".join(round["b"].text for round in updates if "b" in round)
    assert text == model.generate("A", long) and updates[-1]["b"].finish_reason == "length"


def test_an_in_place_cache_is_refused_by_name(tmp_path: Path) -> None:
    model = load(EXPORTED / "gpt")
    model._cache = type("InPlace", (), {"in_place": True})()  # this instance only
    with pytest.raises(ConfigError, match="in place"):
        DecodeBatch(model)


def test_a_stream_holds_back_byte_tokens_until_their_run_settles(
    hf_exports: dict[str, tuple[Path, Path]],
) -> None:
    """Gemma's ByteFallback decoder turns a run of byte tokens into text as a whole, and an invalid run
    into one U+FFFD per byte, the valid ones included: "AAAAA" shown early would later read "�����".
    The tiny Gemma 2 generates such a run from "A"; its stream must join to the final text."""
    model = load(hf_exports["gemma2"][1])
    for prompt in PROMPTS:
        whole = model.generate(prompt, max_new_tokens=12, temperature=0)
        assert "".join(model.stream(prompt, max_new_tokens=12, temperature=0)) == whole, prompt
    assert "\ufffd" in model.generate("A", max_new_tokens=12, temperature=0)  # the case is exercised


NODE_STREAM = """
import { loadEngine, openExport } from "./src/index.js";
const [folder, ...prompts] = process.argv.slice(1);
const model = await openExport(folder, { engine: await loadEngine("native", { threads: 1 }) });
const rows = [];
for (const prompt of prompts) {
  const options = { temperature: 0, maxNewTokens: 12 };
  let joined = "";
  for await (const piece of model.stream(prompt, options)) joined += piece;
  rows.push({ prompt, joined, whole: await model.generate(prompt, options) });
}
model.close();
console.log(JSON.stringify(rows));
"""


def test_the_node_host_streams_byte_token_runs_as_python_does(
    hf_exports: dict[str, tuple[Path, Path]],
) -> None:
    """The same hold-back in onnxruntime-node: the pieces join to the text. That text equals Python's
    unless a byte run is invalid UTF-8: @huggingface/tokenizers (JS) then replaces only the invalid bytes
    ("AAAAA" and a U+FFFD per bad byte) where the Rust library replaces every byte of the run, a difference
    of the two libraries."""
    import json
    import shutil
    import subprocess

    node = shutil.which("node")
    assert node, "Node.js is not installed; the host's tests need it (README: set-up)"
    folder = hf_exports["gemma2"][1]
    done = subprocess.run(
        [node, "--input-type=module", "-e", NODE_STREAM, "--", str(folder), *PROMPTS],
        cwd=Path(__file__).resolve().parents[1] / "hosts" / "node",
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    model = load(folder)
    rows = json.loads(done.stdout)
    for row in rows:
        python = model.generate(row["prompt"], max_new_tokens=12, temperature=0)
        assert row["joined"] == row["whole"], row
        assert row["whole"] == python or "\ufffd" in python, row
    assert any("\ufffd" in row["whole"] for row in rows)  # a byte run was held back and settled
