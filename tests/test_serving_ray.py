"""Batch inference on Ray Data and serving on Ray Serve, on one local Ray instance for the session
(2 CPUs, no dashboard, loopback only, HOME and Ray's temp folder in a temporary folder, shut down at the
end). The Ray output file equals the plain loop's byte for byte, with 1 and 2 actors."""

import json
import os
import re
import socket
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from test_serving import embedding_allowance

from onnxformer.runtime import InputError, load
from onnxformer.runtime.serving.batch import run_batch
from onnxformer.runtime.serving.tasks import GenerationOptions

ray = pytest.importorskip("ray")  # the [ray] extra; `make test` installs it

ROOT = Path(__file__).resolve().parents[1]
EXPORTED = ROOT / "exported"
SENTENCE = "the cat sat on a mat while the small dog chased the red ball under an old table"
OPTIONS = {
    "bert": GenerationOptions(),
    "gpt": GenerationOptions(temperature=1.0, seed=5, max_new_tokens=16),  # seeded sampling
    "t5": GenerationOptions(max_new_tokens=16, num_beams=2),
}


def texts(count: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = SENTENCE.split(" ")
    return [" ".join(rng.choice(words, size=int(n))).capitalize() + "." for n in rng.integers(1, 21, count)]


@pytest.fixture(scope="session")
def local_ray(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("home")
    saved = os.environ.get("HOME")
    os.environ["HOME"] = str(home)  # a local ray.init may write an auth token under HOME
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=100 * 1024**2,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
    )
    try:
        yield ray
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = saved


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("batch") / "in.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts(100))))
    return path


CASES = [("bert", 1), ("bert", 2), ("gpt", 2), ("t5", 2)]


@pytest.mark.parametrize(("family", "actors"), CASES)
def test_ray_output_equals_the_plain_loop_byte_for_byte(
    local_ray, source: Path, tmp_path: Path, family, actors
):
    options = OPTIONS[family]
    plain = run_batch(EXPORTED / family, source, tmp_path / "plain.jsonl", batch_size=16, options=options)
    on_ray = run_batch(EXPORTED / family, source, tmp_path / "ray.jsonl", batch_size=16, options=options,
                       ray_address="auto", actors=actors)  # fmt: skip
    mode = f"ray ({actors} actor{'s' * (actors > 1)})"
    assert (plain.records, on_ray.records, on_ray.mode) == (100, 100, mode)
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "plain.jsonl").read_bytes()


def test_a_bad_text_on_ray_is_named_by_its_line(local_ray, tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    lines = [json.dumps({"text": t}) for t in texts(20)]
    lines[12] = json.dumps({"text": " ".join(["dog"] * 200)})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"in.jsonl line 13: .*shorten the text"):
        run_batch(EXPORTED / "bert", path, tmp_path / "out.jsonl", batch_size=8, ray_address="auto", actors=2,
                  options=GenerationOptions(truncate=False))  # fmt: skip
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.timeout(240)  # the hang it guards against fails here, not at the suite's limit
def test_the_docs_pipeline_finishes_on_two_cpus(local_ray, tmp_path: Path, monkeypatch) -> None:
    """docs/scaling.md's Ray Data example, run as it stands on the session's 2-CPU instance (its ray.init()
    is the fixture's): a pool sized to every CPU would leave none to read the file and never finish."""
    text = (ROOT / "docs" / "scaling.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```python\n(import ray\n.*?)```", text, flags=re.S)
    items = texts(30, seed=4)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": t, "n": i}) + "\n" for i, t in enumerate(items)))
    code = block.replace('"/data/exported/gpt"', repr(str(EXPORTED / "gpt")))
    code = code.replace('"prompts.jsonl"', repr(str(prompts))).replace('"out/"', repr(str(tmp_path / "out")))
    assert code.count(str(tmp_path)) == 2 and str(EXPORTED) in code, "the example's paths changed"
    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: None)
    exec(compile(code, "docs/scaling.md", "exec"), {})
    rows = [json.loads(line) for path in (tmp_path / "out").iterdir() for line in path.open()]
    rows.sort(key=lambda row: row["n"])
    greedy = load(EXPORTED / "gpt").generate(items, temperature=0.0, max_new_tokens=20)  # batch-independent
    assert [row["prompt"] for row in rows] == items
    assert [row["generation"] for row in rows] == greedy


def test_ray_serve_replicas_serve_the_same_app(local_ray) -> None:
    from ray import serve

    from onnxformer.runtime.serving.ray_serve import serve_on_ray

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    serve_on_ray(EXPORTED / "bert", address="auto", port=port, replicas=2, blocking=False)
    try:
        url = f"http://127.0.0.1:{port}"

        def embed(items: list[str]) -> list:
            body = json.dumps({"texts": items}).encode()
            with urllib.request.urlopen(urllib.request.Request(url + "/embed", data=body), timeout=60) as r:
                return json.loads(r.read())["embeddings"]

        with urllib.request.urlopen(url + "/health", timeout=60) as response:
            assert json.loads(response.read()) == {"status": "ok", "task": "embed"}
        requests = [texts(3, seed=s) for s in range(16)]
        with ThreadPoolExecutor(4) as pool:
            served = list(pool.map(embed, requests))
        model = load(EXPORTED / "bert")
        # Concurrent requests share batches in a replica: the same embeddings within the export's allowance.
        alone = np.concatenate([model.embed(items) for items in requests])
        got = np.concatenate([np.array(g, dtype=np.float32) for g in served])
        allowed = embedding_allowance(EXPORTED / "bert", alone)
        print(f"Ray Serve: max |served - alone| = {np.abs(got - alone).max():.3g} (allowed {allowed:.3g})")
        assert np.abs(got - alone).max() <= allowed
        # The OpenAI routes come with the app (the model is named after the folder).
        import openai

        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
        answer = client.embeddings.create(model="bert", input=requests[0])
        assert np.array_equal(
            np.array([d.embedding for d in answer.data], np.float32), model.embed(requests[0])
        )
        try:
            urllib.request.urlopen(urllib.request.Request(url + "/embed", data=b'{"texts": [1]}'), timeout=60)
            raise AssertionError("a bad request was accepted")
        except urllib.error.HTTPError as error:
            assert error.code == 422 and json.loads(error.read())["error"]["field"] == "texts[0]"
    finally:
        serve.shutdown()


def test_the_batch_command_on_ray(local_ray, source: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from onnxformer.cli.main import app as cli

    plain = run_batch(EXPORTED / "t5", source, tmp_path / "plain.jsonl", batch_size=8)
    arguments = ["batch", str(EXPORTED / "t5"), str(source), "--out", str(tmp_path / "ray.jsonl"),
                 "--batch-size", "8", "--ray", "auto", "--actors", "2", "--json"]  # fmt: skip
    result = CliRunner().invoke(cli, arguments)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["records"], summary["task"], summary["mode"]) == (
        plain.records,
        "seq2seq",
        "ray (2 actors)",
    )
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "plain.jsonl").read_bytes()
