"""Batch inference without Ray (`onnxformer.runtime.serving.batch`): the plain loop's output equals the
runtime called on the same chunks (equality, not closeness), bad input lines are named by number, and the
output file is written atomically and never replaces an existing one unasked. Torch-free, no Ray."""

import json
from pathlib import Path

import numpy as np
import pytest

from onnxformer.runtime import InputError, load
from onnxformer.runtime.serving.batch import BatchPredictor, run_batch
from onnxformer.runtime.serving.tasks import GenerationOptions

EXPORTED = Path(__file__).resolve().parents[2] / "exported"
SENTENCE = "the cat sat on a mat while the small dog chased the red ball under an old table"
WORDS = SENTENCE.split(" ")
BATCH = 8
OPTIONS = {
    "bert": GenerationOptions(),
    "gpt": GenerationOptions(temperature=0.0, max_new_tokens=12),
    "t5": GenerationOptions(max_new_tokens=16),
}


def texts(count: int, seed: int = 0) -> list[str]:
    """Texts of 1 to 20 words, so chunks pad to different lengths."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(n))).capitalize() + "." for n in rng.integers(1, 21, count)]


def write_input(path: Path, items: list[str]) -> Path:
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(items)))
    return path


def read_output(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("family", ["bert", "gpt", "t5"])
def test_plain_loop_equals_the_runtime_on_the_same_chunks(tmp_path: Path, family: str) -> None:
    items = texts(37)  # 4 full chunks of 8 and one of 5
    source = write_input(tmp_path / "in.jsonl", items)
    run = run_batch(
        EXPORTED / family, source, tmp_path / "out.jsonl", batch_size=BATCH, options=OPTIONS[family]
    )
    rows = read_output(tmp_path / "out.jsonl")
    assert run.records == len(rows) == len(items)
    assert [r["id"] for r in rows] == list(range(len(items)))
    assert [r["text"] for r in rows] == items
    model = load(EXPORTED / family)
    o = OPTIONS[family]
    for start in range(0, len(items), BATCH):
        chunk, got = items[start : start + BATCH], rows[start : start + BATCH]
        if family == "bert":
            expected = model.embed(chunk, batch_size=BATCH)
            vectors = np.array([r["embedding"] for r in got], dtype=np.float32)
            print(f"chunk {start}: max |batch - runtime| = {np.abs(vectors - expected).max()}")
            assert np.array_equal(vectors, expected)
        elif family == "gpt":
            expected = model.generate(chunk, temperature=o.temperature, max_new_tokens=o.max_new_tokens)
            assert [r["generation"] for r in got] == expected
        else:
            assert [r["output"] for r in got] == model.generate(chunk, max_new_tokens=o.max_new_tokens)


def test_the_predictor_maps_a_batch_and_keeps_its_columns() -> None:
    predictor = BatchPredictor(EXPORTED / "bert", column="sentence", batch_size=3)
    batch = {"sentence": np.array(texts(7), dtype=object), "key": np.arange(7)}
    out = predictor(batch)
    assert predictor.task.name == "embed" and out["embedding"].shape == (7, predictor.model.dim)
    assert np.array_equal(out["key"], np.arange(7))
    expected = np.concatenate([predictor.model.embed(list(batch["sentence"][i : i + 3])) for i in (0, 3, 6)])
    assert np.array_equal(out["embedding"], expected)
    with pytest.raises(InputError, match="no 'text' column"):
        BatchPredictor(EXPORTED / "bert")({"sentence": batch["sentence"]})


def test_an_existing_output_is_kept_without_overwrite(tmp_path: Path) -> None:
    source = write_input(tmp_path / "in.jsonl", texts(5))
    out = tmp_path / "out.jsonl"
    run_batch(EXPORTED / "bert", source, out)
    earlier = out.read_bytes()
    with pytest.raises(InputError, match="already exists; pass --overwrite"):
        run_batch(EXPORTED / "bert", source, out)
    assert out.read_bytes() == earlier
    write_input(source, texts(3))
    run_batch(EXPORTED / "bert", source, out, overwrite=True)
    assert len(read_output(out)) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl"]  # no temporary left


@pytest.mark.parametrize(
    "mine", ["precious\n", '{"text": "my own notes"}\n', "", '{"embedding": "an output"}\nnot json\n']
)
def test_a_file_batch_did_not_write_is_never_replaced(tmp_path: Path, mine: str) -> None:
    """--overwrite replaces an earlier output of batch only: a file of the user's at --out (notes, a JSONL
    of their own) is refused by name and kept as it was. An empty file (nothing to lose) and a file whose
    first record is an output's are replaced."""
    source = write_input(tmp_path / "in.jsonl", texts(2))
    out = tmp_path / "out.jsonl"
    out.write_text(mine)
    if mine == "" or mine.startswith('{"embedding"'):
        run_batch(EXPORTED / "bert", source, out, overwrite=True)
        assert len(read_output(out)) == 2
        return
    for overwrite in (False, True):
        with pytest.raises(InputError, match=r"refusing to replace .*out\.jsonl: it is not an output of"):
            run_batch(EXPORTED / "bert", source, out, overwrite=overwrite)
        assert out.read_text() == mine


BAD_LINES = [
    ("not json", "line 3: not valid JSON"),
    ('["a list"]', "line 3: a JSON list, not an object"),
    ('{"body": "x"}', "line 3: no 'text' field \\(it has \\['body'\\]\\); choose the field with --column"),
    ('{"text": 7}', "line 3: 'text' must be a string, got int"),
    ('{"text": "x", "embedding": 1}', "line 3: already has an 'embedding' field"),
    (json.dumps({"text": " ".join(["cat"] * 200)}), "line 3: .*shorten the text"),
]


@pytest.mark.parametrize(("line", "message"), BAD_LINES)
def test_a_bad_line_is_named_and_nothing_is_written(tmp_path: Path, line: str, message: str) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "The cat sat."}\n\n' + line + '\n{"text": "The dog ran."}\n')  # line 2 blank
    refuse_long = GenerationOptions(truncate=False)  # a long text is cut by default (the next test)
    with pytest.raises(InputError, match=message):
        run_batch(EXPORTED / "bert", source, tmp_path / "out.jsonl", batch_size=2, options=refuse_long)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_a_long_text_is_embedded_cut_and_a_bom_is_not_text(tmp_path: Path) -> None:
    """As TextEncoder.embed: a text past the export's max length is cut to it. A UTF-8 byte order mark
    (Windows tools write one) before the first record is not part of it."""
    long = " ".join(["cat"] * 200)
    source = tmp_path / "in.jsonl"
    source.write_bytes(
        b"\xef\xbb\xbf" + "".join(json.dumps({"text": t}) + "\n" for t in ("A cat.", long)).encode()
    )
    run_batch(EXPORTED / "bert", source, tmp_path / "out.jsonl")
    rows = read_output(tmp_path / "out.jsonl")
    assert [row["text"] for row in rows] == ["A cat.", long]
    model = load(EXPORTED / "bert")
    assert np.array_equal(
        np.array([r["embedding"] for r in rows], dtype=np.float32), model.embed(["A cat.", long])
    )


def test_length_penalty_reaches_beam_search(tmp_path: Path) -> None:
    """Every option of the export's task reaches the model; length_penalty changes which beam wins here."""
    source = write_input(tmp_path / "in.jsonl", ["While.", "The cat."])
    t5 = load(EXPORTED / "t5")
    outputs = []
    for penalty in (-10.0, 10.0):
        options = GenerationOptions(num_beams=6, length_penalty=penalty)
        run_batch(EXPORTED / "t5", source, tmp_path / f"{penalty}.jsonl", options=options)
        outputs.append([row["output"] for row in read_output(tmp_path / f"{penalty}.jsonl")])
        assert outputs[-1] == t5.generate(["While.", "The cat."], options)
    assert outputs[0] != outputs[1]


def test_options_that_do_not_apply_are_refused_before_any_work(tmp_path: Path) -> None:
    source = write_input(tmp_path / "in.jsonl", texts(3))
    with pytest.raises(InputError, match="max_new_tokens: not an option of embed"):
        run_batch(
            EXPORTED / "bert", source, tmp_path / "o.jsonl", options=GenerationOptions(max_new_tokens=3)
        )
    with pytest.raises(InputError, match="truncate: not an option of generate"):
        run_batch(EXPORTED / "gpt", source, tmp_path / "o.jsonl", options=GenerationOptions(truncate=False))
    with pytest.raises(
        InputError, match=r"num_beams: not an option of generate \(beam search runs on seq2seq"
    ):
        run_batch(EXPORTED / "gpt", source, tmp_path / "o.jsonl", options=GenerationOptions(num_beams=2))
    with pytest.raises(InputError, match=r"stop: not an option of seq2seq \(stop strings cut"):
        run_batch(EXPORTED / "t5", source, tmp_path / "o.jsonl", options=GenerationOptions(stop=["."]))
    with pytest.raises(InputError, match="holds no records"):
        run_batch(EXPORTED / "bert", write_input(tmp_path / "empty.jsonl", []), tmp_path / "o.jsonl")
    assert not (tmp_path / "o.jsonl").exists()
