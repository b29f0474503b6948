"""The HTTP/JSON server (`onnxformer serve`) over loopback, the Triton model repository, and the batch /
serve / triton commands. Results equal the runtime's exactly, concurrent requests equal sequential ones,
and every refused request is a 4xx whose JSON names the field."""

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc.model_config_pb2 as model_config
from google.protobuf import text_format
from typer.testing import CliRunner

from onnxformer.cli.main import app as cli
from onnxformer.runtime import ConfigError, InputError, load
from onnxformer.runtime.generation_options import OPTIONS, names_for
from onnxformer.runtime.serving.app import Limits, background_server, create_app, read_events, serve_local
from onnxformer.runtime.serving.triton import TRITON_DTYPES, write_repository

EXPORTED = Path(__file__).resolve().parents[1] / "exported"
SENTENCE = "the cat sat on a mat while the small dog chased the red ball under an old table"
TASKS = {"bert": "embed", "gpt": "generate", "t5": "seq2seq"}
KEYS = {"embed": "embeddings", "generate": "generations", "seq2seq": "outputs"}


def texts(count: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = SENTENCE.split(" ")
    return [" ".join(rng.choice(words, size=int(n))).capitalize() + "." for n in rng.integers(1, 21, count)]


def call(url: str, body: object = None, *, method: str = "POST") -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def models() -> dict:
    return {family: load(EXPORTED / family) for family in TASKS}


@pytest.fixture(scope="module")
def servers(models: dict):
    """One uvicorn server per family on a free loopback port, for the whole module."""
    with (
        background_server(create_app(models["bert"])) as bert,
        background_server(create_app(models["gpt"])) as gpt,
        background_server(create_app(models["t5"])) as t5,
        background_server(
            create_app(models["bert"], limits=Limits(max_body_bytes=300, max_texts=3))
        ) as small,
    ):
        yield {"bert": bert, "gpt": gpt, "t5": t5, "small": small}


@pytest.mark.parametrize("family", list(TASKS))
def test_health_and_info_come_from_the_manifest(servers: dict, models: dict, family: str) -> None:
    assert call(servers[family] + "/health", method="GET") == (200, {"status": "ok", "task": TASKS[family]})
    status, info = call(servers[family] + "/info", method="GET")
    manifest = models[family].export.manifest
    assert status == 200
    assert (info["family"], info["task"], info["endpoint"]) == (family, TASKS[family], f"/{TASKS[family]}")
    assert info["config"] == manifest.config and info["opset"] == manifest.opset
    assert info["limits"]["max_texts"] == Limits().max_texts
    assert list(info["options"]) == list(names_for(models[family].task))  # the fields besides texts


def test_embed_equals_the_runtime_exactly(servers: dict, models: dict) -> None:
    items = texts(9)
    status, body = call(servers["bert"] + "/embed", {"texts": items})
    got = np.array(body["embeddings"], dtype=np.float32)
    expected = models["bert"].embed(items)
    print(f"max |served - runtime| = {np.abs(got - expected).max()}")
    assert status == 200 and np.array_equal(got, expected)


def test_embed_cuts_a_long_text_unless_told_not_to(servers: dict, models: dict) -> None:
    items = ["The cat sat.", " ".join(["cat"] * 200)]
    status, body = call(servers["bert"] + "/embed", {"texts": items})
    assert status == 200 and np.array_equal(
        np.array(body["embeddings"], np.float32), models["bert"].embed(items)
    )
    status, body = call(servers["bert"] + "/embed", {"texts": items, "truncate": True})
    assert status == 200


def test_generate_and_seq2seq_equal_the_runtime(servers: dict, models: dict) -> None:
    items = texts(4, seed=1)
    for options in ({"temperature": 0, "max_new_tokens": 15}, {"temperature": 1.0, "seed": 7, "top_k": 20}):
        status, body = call(servers["gpt"] + "/generate", {"texts": items, **options})
        assert status == 200 and body["generations"] == models["gpt"].generate(items, **options)
    status, body = call(
        servers["gpt"] + "/generate", {"texts": ["The cat"], "temperature": 0, "stop": [" the"]}
    )
    assert body["generations"] == models["gpt"].generate(["The cat"], temperature=0, stop=[" the"])
    for options in ({}, {"num_beams": 3}):
        status, body = call(servers["t5"] + "/seq2seq", {"texts": items, **options})
        assert status == 200 and body["outputs"] == models["t5"].generate(items, **options)


def test_streaming_pieces_join_to_the_generated_text(servers: dict, models: dict) -> None:
    options = {"temperature": 1.0, "seed": 3, "max_new_tokens": 30}
    body = json.dumps({"texts": ["The dog"], "stream": True, **options}).encode()
    request = urllib.request.Request(servers["gpt"] + "/generate", data=body)
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = list(read_events(line.decode() for line in response))
    pieces = [data["text"] for kind, data in events if kind == "message"]
    expected = models["gpt"].generate("The dog", **options)
    assert len(pieces) > 1 and events[-1] == ("done", {"text": expected})
    assert "".join(pieces) == expected


def _requests(family: str) -> list[dict]:
    items = texts(24, seed=2)
    if family == "bert":
        return [{"texts": items[i : i + 1 + i % 4]} for i in range(24)]
    if family == "gpt":
        return [
            {"texts": [t], "temperature": 1.0, "seed": i, "max_new_tokens": 20} for i, t in enumerate(items)
        ]
    return [{"texts": [t], "num_beams": 1 + i % 3} for i, t in enumerate(items)]


@pytest.mark.parametrize("family", list(TASKS))
def test_concurrent_requests_equal_sequential_ones(servers: dict, family: str) -> None:
    url = f"{servers[family]}/{TASKS[family]}"
    bodies = _requests(family)
    sequential = [call(url, body) for body in bodies]
    with ThreadPoolExecutor(4) as pool:  # 4 clients x 3 rounds over the same 24 requests
        concurrent = list(pool.map(lambda body: call(url, body), bodies * 3))
    assert all(status == 200 for status, _ in sequential + concurrent)
    if family != "bert":  # tokens: batched equals alone exactly
        assert concurrent == sequential * 3
        return
    # Concurrent embeddings run in batches padded to other requests' lengths: the same embedding, within
    # the export's own allowance for any engine's embedding of a text (its end-to-end goldens' atol, rtol).
    alone = np.array([body["embeddings"][0] for _, body in sequential] * 3)
    together = np.array([body["embeddings"][0] for _, body in concurrent])
    allowed = embedding_allowance(EXPORTED / "bert", alone)
    print(f"max |batched - alone| = {np.abs(together - alone).max():.3g} (allowed {allowed:.3g})")
    assert np.abs(together - alone).max() <= allowed


def embedding_allowance(folder: Path, vectors: np.ndarray) -> float:
    """How far an embedding may be from another engine's (or batch's) run of the same text: the export's
    end-to-end embedding tolerance (goldens/end_to_end.json), at the size of these vectors."""
    from onnxformer.runtime.goldens import allowance

    tolerance = json.loads((folder / "goldens" / "end_to_end.json").read_text())["embeddings"]
    return allowance(vectors, float(tolerance["atol"]), float(tolerance["rtol"]))


REFUSED = [
    ("bert", b"{not json", 400, None, "not JSON"),
    ("bert", b'["texts"]', 400, None, "JSON object"),
    ("bert", {"text": ["a"]}, 422, "text", "unknown field 'text'"),
    ("bert", {}, 422, "texts", "missing"),
    ("bert", {"texts": "a"}, 422, "texts", "list of strings"),
    ("bert", {"texts": []}, 422, "texts", "at least one"),
    ("bert", {"texts": ["a", 2]}, 422, "texts[1]", "must be a string"),
    ("bert", {"texts": ["a"] * 65}, 413, "texts", "at most 64"),
    ("bert", {"texts": ["a"], "max_new_tokens": 3}, 422, "max_new_tokens", "unknown field"),
    ("bert", {"texts": [" ".join(["cat"] * 200)], "truncate": False}, 422, "texts", "shorten the text"),
    ("bert", {"texts": ["a"], "truncate": "no"}, 422, "truncate", "must be true or false"),
    ("gpt", {"texts": ["a"], "truncate": False}, 422, "truncate", "unknown field 'truncate'"),
    ("gpt", {"texts": ["a"], "max_new_tokens": 100000}, 422, "max_new_tokens", "between 1 and 256"),
    ("gpt", {"texts": ["a"], "max_new_tokens": 2.5}, 422, "max_new_tokens", "integer"),
    (
        "gpt",
        {"texts": ["a"], "temperature": -1},
        422,
        "temperature",
        "must be between 0.0 and 1e+300, got -1",
    ),
    ("gpt", {"texts": ["a"], "temperature": 1e301}, 422, "temperature", "between 0.0 and 1e+300"),
    ("gpt", {"texts": ["a"], "top_k": -2}, 422, "top_k", "must be at least 0, got -2"),
    ("gpt", {"texts": ["a"], "top_p": 1.5}, 422, "top_p", "between 0.0 and 1.0"),
    ("gpt", {"texts": ["a"], "top_p": 0}, 422, "top_p", "top_p must be a number in (0, 1], got 0.0"),
    ("gpt", {"texts": ["a"], "num_beams": 2}, 422, "num_beams", "beam search runs on seq2seq exports only"),
    ("gpt", {"texts": ["a"], "stop_tokens": [2, "x"]}, 422, "stop_tokens[1]", "must be an integer"),
    ("gpt", {"texts": ["a"], "stop_tokens": [10**6]}, 422, "stop_tokens", "token ids in 0 .. "),
    ("gpt", {"texts": ["a"], "seed": True}, 422, "seed", "integer"),
    ("gpt", {"texts": ["a"], "stop": "x"}, 422, "stop", "list of strings"),
    ("gpt", {"texts": ["a", "b"], "stream": True}, 422, "texts", "exactly one"),
    ("gpt", {"texts": ["a"], "stream": "yes"}, 422, "stream", "true or false"),
    ("t5", {"texts": ["a"], "num_beams": 99}, 422, "num_beams", "between 1 and 8"),
    ("t5", {"texts": ["a"], "num_beams": 2, "seed": 1}, 422, "num_beams", "beam search"),
    ("t5", {"texts": ["a"], "length_penalty": 11}, 422, "length_penalty", "between -10.0 and 10.0"),
    ("t5", {"texts": ["a"], "stop": ["x"]}, 422, "stop", "not an option of seq2seq (stop strings"),
    ("t5", {"texts": ["a", ""]}, 422, "texts[1]", "is empty"),
    ("small", {"texts": ["a", "b", "c", "d"]}, 413, "texts", "at most 3"),
    ("small", {"texts": ["x" * 400]}, 413, None, "over 300 bytes"),
]


@pytest.mark.parametrize(("server", "body", "status", "field", "message"), REFUSED)
def test_refused_requests_name_the_field(servers: dict, server, body, status, field, message) -> None:
    endpoint = "embed" if server == "small" else TASKS[server]
    got, answer = call(f"{servers[server]}/{endpoint}", body)
    assert (got, answer["error"]["field"]) == (status, field), answer
    assert message in answer["error"]["message"]


# A valid value of every option, for the test below; a new option needs one here.
SAMPLES = {"max_new_tokens": 3, "temperature": 0.0, "top_k": 5, "top_p": 0.9, "seed": 2, "stop": ["."],
           "stop_tokens": [], "num_beams": 2, "length_penalty": 0.5, "truncate": False}  # fmt: skip


@pytest.mark.parametrize("family", list(TASKS))
def test_every_option_of_a_task_is_a_field(servers: dict, models: dict, family: str) -> None:
    """The HTTP fields come from GenerationOptions: each option of the task is taken, one at a time, and
    gives what the runtime gives with it."""
    assert set(SAMPLES) == set(OPTIONS)
    model = models[family]
    for name in names_for(model.task):
        # GPT samples by default: seeded, so that the two calls draw the same
        options = {"seed": 1, name: SAMPLES[name]} if family == "gpt" else {name: SAMPLES[name]}
        status, answer = call(f"{servers[family]}/{TASKS[family]}", {"texts": ["The cat sat."], **options})
        assert status == 200, (name, answer)
        if family != "bert":
            assert answer[KEYS[TASKS[family]]] == model.generate(["The cat sat."], **options)


def test_length_penalty_reaches_beam_search_over_http(servers: dict, models: dict) -> None:
    """length_penalty, once not an HTTP field, changes which beam wins for these texts, as in the runtime."""
    items = ["While.", "The cat."]
    outputs = {}
    for penalty in (-10.0, 10.0):
        status, body = call(
            servers["t5"] + "/seq2seq", {"texts": items, "num_beams": 6, "length_penalty": penalty}
        )
        assert status == 200 and body["outputs"] == models["t5"].generate(
            items, num_beams=6, length_penalty=penalty
        )
        outputs[penalty] = body["outputs"]
    assert outputs[-10.0] != outputs[10.0]


def test_the_field_of_an_input_error_is_reported_whatever_its_message() -> None:
    """The server reports the field the runtime's InputError carries; it never reads the message (which
    here names another option)."""
    model = load(EXPORTED / "gpt")
    raised = []

    def refuse(texts, **keywords):
        raise raised[-1]

    model.frame_all = refuse  # this instance only: the server frames each request's prompts first
    with background_server(create_app(model)) as url:
        raised.append(InputError("temperature must be a number; text 0 is 900 tokens", field="top_p"))
        assert call(url + "/generate", {"texts": ["a"]}) == (
            422,
            {"error": {"field": "top_p", "message": "temperature must be a number; text 0 is 900 tokens"}},
        )
        raised.append(InputError("top_k must be an integer >= 0"))  # no field: about the texts
        status, body = call(url + "/generate", {"texts": ["a"]})
        assert (status, body["error"]["field"]) == (422, "texts")


def test_wrong_endpoints_and_methods_answer_json(servers: dict) -> None:
    status, body = call(servers["bert"] + "/generate", {"texts": ["a"]})
    assert status == 404 and "bert export; POST /embed" in body["error"]["message"]
    status, body = call(servers["bert"] + "/nowhere", {"texts": ["a"]})
    assert status == 404 and "/health, /info, /metrics, /embed and /v1/models" in body["error"]["message"]
    status, body = call(servers["bert"] + "/embed", method="GET")
    assert status == 405 and body["error"]["message"]


@pytest.mark.parametrize("family", ["bert", "t5"])
def test_triton_repository_parses_as_a_model_config(tmp_path: Path, models: dict, family: str) -> None:
    (name,) = write_repository(EXPORTED / family, tmp_path / "repo")
    config = text_format.Parse(
        (tmp_path / "repo" / name / "config.pbtxt").read_text(), model_config.ModelConfig()
    )
    manifest = models[family].export.manifest
    path = manifest.graphs["encoder"]
    (entry,) = [f for f in manifest.files if f.path == path]
    onnx_file = tmp_path / "repo" / name / "1" / "model.onnx"
    assert hashlib.sha256(onnx_file.read_bytes()).hexdigest() == entry.sha256
    assert (config.name, config.backend, config.max_batch_size) == (f"{family}_encoder", "onnxruntime", 0)
    for tensors, specs in ((config.input, entry.inputs), (config.output, entry.outputs)):
        assert [t.name for t in tensors] == [s.name for s in specs]
        assert [model_config.DataType.Name(t.data_type) for t in tensors] == [
            TRITON_DTYPES[s.dtype] for s in specs
        ]
        assert [list(t.dims) for t in tensors] == [
            [d if isinstance(d, int) else -1 for d in s.shape] for s in specs
        ]
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == [t.name for t in config.input]
    assert [o.name for o in session.get_outputs()] == [t.name for t in config.output]
    with pytest.raises(InputError, match="already exists; pass --overwrite"):
        write_repository(EXPORTED / family, tmp_path / "repo")


def test_triton_replaces_only_a_repository(tmp_path: Path) -> None:
    """--overwrite replaces an earlier Triton repository, never an export folder or a folder of yours."""
    export = tmp_path / "bert-export"
    shutil.copytree(EXPORTED / "bert", export)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    for target in (export, mine):
        before = sorted(p.name for p in target.rglob("*"))
        with pytest.raises(InputError, match="not a Triton model repository onnxformer wrote"):
            write_repository(EXPORTED / "bert", target, overwrite=True)
        assert sorted(p.name for p in target.rglob("*")) == before
    repo = tmp_path / "repo"
    write_repository(EXPORTED / "bert", repo)
    (name,) = write_repository(EXPORTED / "bert", repo, name="again", overwrite=True)
    assert [p.name for p in repo.iterdir()] == [name]


@pytest.mark.parametrize(
    "added", ["again_encoder/notes.txt", "again_encoder/2/model.onnx", "mymodel/config.pbtxt"]
)
def test_triton_overwrite_keeps_what_the_user_added(tmp_path: Path, added: str) -> None:
    """A file of the user's beside ours, or a model of their own in the repository, is named and the
    repository refused even with --overwrite; nothing in it changes."""
    repo = tmp_path / "repo"
    write_repository(EXPORTED / "bert", repo, name="again")
    (repo / added).parent.mkdir(parents=True, exist_ok=True)
    (repo / added).write_text('name: "mine"\n')
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    with pytest.raises(InputError, match=re.escape(added.split("/config.pbtxt")[0])):
        write_repository(EXPORTED / "bert", repo, name="again", overwrite=True)
    assert {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()} == before


def test_triton_refuses_an_unmarked_repository(tmp_path: Path) -> None:
    """A Triton repository that onnxformer did not write (no mark in its config.pbtxt) is never replaced."""
    repo = tmp_path / "repo"
    write_repository(EXPORTED / "bert", repo)
    config = repo / "bert_encoder" / "config.pbtxt"
    config.write_text("".join(config.read_text().splitlines(keepends=True)[1:]))
    with pytest.raises(InputError, match=r"not a Triton model repository onnxformer wrote.*\(bert_encoder\)"):
        write_repository(EXPORTED / "bert", repo, overwrite=True)
    assert config.read_text().startswith('name: "bert_encoder"')


def test_triton_refuses_a_decoder_only_export(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no encoder graph"):
        write_repository(EXPORTED / "gpt", tmp_path / "repo")
    assert not (tmp_path / "repo").exists()


def test_the_commands(tmp_path: Path) -> None:
    runner = CliRunner()
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts(10)))
    gpt, out = str(EXPORTED / "gpt"), str(tmp_path / "o.jsonl")
    options = ["--temperature", "0", "--max-new-tokens", "8", "--batch-size", "4", "--json"]
    result = runner.invoke(cli, ["batch", gpt, str(source), "--out", out, *options])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["records"], summary["task"], summary["mode"]) == (10, "generate", "local")
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    model = load(EXPORTED / "gpt")
    expected = [
        g
        for i in range(0, 10, 4)
        for g in model.generate(texts(10)[i : i + 4], temperature=0, max_new_tokens=8)
    ]
    assert [r["generation"] for r in rows] == expected
    again = runner.invoke(
        cli, ["batch", str(EXPORTED / "gpt"), str(source), "--out", str(tmp_path / "o.jsonl")]
    )
    assert again.exit_code == 1 and "pass --overwrite" in again.stderr
    result = runner.invoke(cli, ["triton", str(EXPORTED / "bert"), "--out", str(tmp_path / "repo")])
    assert result.exit_code == 0 and (tmp_path / "repo" / "bert_encoder" / "config.pbtxt").is_file()


def test_batch_takes_every_option_length_penalty_included(tmp_path: Path) -> None:
    """`batch` once built its options positionally and had no --length-penalty (nor --stop, --stop-tokens):
    its flags now come from GenerationOptions, and length_penalty changes which beam wins here."""
    runner = CliRunner()
    source = tmp_path / "in.jsonl"
    items = ["While.", "The cat."]
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in items))
    t5 = load(EXPORTED / "t5")
    outputs = {}
    for penalty in ("-10", "10"):
        out = tmp_path / f"out{penalty}.jsonl"
        flags = ["--num-beams", "6", "--length-penalty", penalty]
        result = runner.invoke(cli, ["batch", str(EXPORTED / "t5"), str(source), "--out", str(out), *flags])
        assert result.exit_code == 0, result.output
        outputs[penalty] = [json.loads(line)["output"] for line in out.read_text().splitlines()]
        assert outputs[penalty] == t5.generate(items, num_beams=6, length_penalty=float(penalty))
    assert outputs["-10"] != outputs["10"]
    gpt_out = tmp_path / "gpt.jsonl"
    flags = ["--temperature", "0", "--stop", " the", "--max-new-tokens", "12"]
    result = runner.invoke(cli, ["batch", str(EXPORTED / "gpt"), str(source), "--out", str(gpt_out), *flags])
    assert result.exit_code == 0, result.output
    expected = load(EXPORTED / "gpt").generate(items, temperature=0, stop=[" the"], max_new_tokens=12)
    assert [json.loads(line)["generation"] for line in gpt_out.read_text().splitlines()] == expected
    result = runner.invoke(
        cli, ["batch", str(EXPORTED / "gpt"), str(source), "--out", str(tmp_path / "x"), "--num-beams", "2"]
    )
    assert result.exit_code == 1 and "num_beams: not an option of generate (beam search" in result.stderr


def test_a_missing_extra_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxformer.runtime.serving.tasks as tasks

    real = tasks.importlib.util.find_spec
    monkeypatch.setattr(tasks.importlib.util, "find_spec", lambda name: None if name == "ray" else real(name))
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "The cat."}\n')
    result = CliRunner().invoke(
        cli, ["batch", str(EXPORTED / "bert"), str(source), "--out", str(tmp_path / "o"), "--ray", "auto"]
    )
    assert result.exit_code == 1
    assert (
        result.stderr.strip()
        == 'error: this needs ray, which is not installed: pip install "onnxformer[ray]"'
    )


@pytest.mark.parametrize("port", [0, 70000, True, "8000"])
def test_the_servers_refuse_a_port_outside_1_to_65535(port: object) -> None:
    """Checked before the model loads or Ray starts (uvicorn and Ray would listen elsewhere)."""
    from onnxformer.runtime.serving.ray_serve import serve_on_ray

    for serve in (serve_local, serve_on_ray):
        with pytest.raises(ConfigError, match=f"port must be an integer from 1 to 65535, got {port!r}"):
            serve(EXPORTED / "bert", port=port)


def test_serve_command_runs_uvicorn(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        str(Path(sys.executable).parent / "onnxformer"),
        "serve",
        str(EXPORTED / "t5"),
        "--port",
        str(port),
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tmp_path
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, body = call(
                    f"http://127.0.0.1:{port}/seq2seq", {"texts": ["The cat chased the dog."]}
                )
                break
            except urllib.error.URLError:
                assert server.poll() is None and time.monotonic() < deadline, server.stdout.read().decode()
                time.sleep(0.2)
        assert status == 200 and body["outputs"] == [
            load(EXPORTED / "t5").generate("The cat chased the dog.")
        ]
    finally:
        server.terminate()
        server.wait(timeout=30)
