"""The OpenAI API of `onnxformer serve`, driven by the official `openai` client over loopback: models,
embeddings (float and base64), completions and chat (with the export's chat template, as transformers
renders it), streaming, usage, errors in OpenAI's shape; and the server under load: batching across
requests, the bounded queue (503 + Retry-After), the time limit (504), a client that goes away, /metrics,
and SIGTERM draining the requests in flight."""

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest
from test_serving import EXPORTED, SENTENCE, embedding_allowance, texts

from onnxformer.runtime import InputError, load
from onnxformer.runtime.serving.app import ServerOptions, background_server, create_app
from onnxformer.runtime.serving.scheduler import BatchSettings

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Cat? ü 🐈"},
    {"role": "assistant", "content": "Mat."},
    {"role": "user", "content": [{"type": "text", "text": "Dog?"}]},
]


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)


def post(url: str, body: dict) -> tuple[int, dict, Any]:
    """The status, JSON body and headers (looked up in any case) of a POST."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read()), response.headers
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers


@pytest.fixture(scope="module")
def qwen3(hf_exports: dict[str, tuple[Path, Path]]) -> tuple[Path, Path]:
    return hf_exports["qwen3"]  # (the transformers folder with a ChatML template, its export)


@pytest.fixture(scope="module")
def models(qwen3: tuple[Path, Path]) -> dict:
    return {"bert": load(EXPORTED / "bert"), "gpt": load(EXPORTED / "gpt"), "qwen3": load(qwen3[1])}


@pytest.fixture(scope="module")
def urls(models: dict):
    with (
        background_server(create_app(models["bert"], options=ServerOptions(model_name="bert"))) as bert,
        background_server(create_app(models["gpt"], options=ServerOptions(model_name="gpt"))) as gpt,
        background_server(create_app(models["qwen3"], options=ServerOptions(model_name="qwen3"))) as qwen3,
    ):
        yield {"bert": bert, "gpt": gpt, "qwen3": qwen3}


def test_models_lists_the_one_model(urls: dict) -> None:
    listed = client(urls["gpt"]).models.list()
    assert [model.id for model in listed.data] == ["gpt"]
    assert client(urls["gpt"]).models.retrieve("gpt").id == "gpt"
    with pytest.raises(openai.NotFoundError, match="serves 'gpt'"):
        client(urls["gpt"]).models.retrieve("gpt-4o")


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_embeddings_equal_the_runtime(urls: dict, models: dict, encoding: str) -> None:
    items = texts(5, seed=3)
    # Asked for base64, the client hands the string back; left to itself it asks for base64 and decodes it.
    answer = client(urls["bert"]).embeddings.create(model="bert", input=items, encoding_format=encoding)
    got = np.array([decoded(item.embedding) for item in answer.data], dtype=np.float32)
    expected = models["bert"].embed(items)
    print(f"{encoding}: max |served - runtime| = {np.abs(got - expected).max()}")
    assert np.array_equal(got, expected)
    assert [item.index for item in answer.data] == list(range(5))
    framed = sum(len(models["bert"].frame(t)) for t in items)
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == framed
    one = client(urls["bert"]).embeddings.create(model="bert", input="The cat sat.")
    assert np.array_equal(np.array(one.data[0].embedding, np.float32), models["bert"].embed("The cat sat."))


def decoded(embedding: list[float] | str) -> np.ndarray:
    if isinstance(embedding, str):
        return np.frombuffer(base64.b64decode(embedding), dtype="<f4")
    return np.array(embedding, dtype=np.float32)


def test_completions_equal_the_runtime(urls: dict, models: dict) -> None:
    gpt = models["gpt"]
    prompts = texts(3, seed=5)
    answer = client(urls["gpt"]).completions.create(model="gpt", prompt=prompts, max_tokens=12, temperature=0)
    expected = [gpt.generate_ids([gpt.frame(p)], max_new_tokens=12, temperature=0)[0] for p in prompts]
    assert [c.text for c in answer.choices] == [gpt.tokenizer.decode(e.tokens) for e in expected]
    assert [c.finish_reason for c in answer.choices] == [e.finish_reason for e in expected]
    assert answer.usage.prompt_tokens == sum(len(gpt.frame(p)) for p in prompts)
    assert answer.usage.completion_tokens == sum(len(e.tokens) for e in expected)
    seeded = dict(model="gpt", prompt="The cat", max_tokens=20, temperature=1.0, top_p=0.9, seed=11)
    first = client(urls["gpt"]).completions.create(**seeded).choices[0].text
    assert first == client(urls["gpt"]).completions.create(**seeded).choices[0].text
    assert first == gpt.generate("The cat", max_new_tokens=20, temperature=1.0, top_p=0.9, seed=11)
    stopped = client(urls["gpt"]).completions.create(
        model="gpt", prompt="The cat", temperature=0, stop=[" the"]
    )
    assert stopped.choices[0].text == gpt.generate("The cat", temperature=0, stop=[" the"])


def test_chat_renders_the_template_as_transformers_does(urls: dict, models: dict, qwen3: tuple) -> None:
    import transformers

    folder, _ = qwen3
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    ids = reference.apply_chat_template(
        [
            {**m, "content": m["content"] if isinstance(m["content"], str) else m["content"][0]["text"]}
            for m in MESSAGES
        ],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    model = models["qwen3"]
    answer = client(urls["qwen3"]).chat.completions.create(
        model="qwen3", messages=MESSAGES, max_tokens=10, temperature=0
    )
    expected = model.generate_ids([list(ids)], max_new_tokens=10, temperature=0)[0]
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].message.content == model.tokenizer.decode(expected.tokens)
    assert answer.usage.prompt_tokens == len(ids)
    assert answer.usage.completion_tokens == len(expected.tokens)


def test_streams_join_to_the_whole_answer(urls: dict) -> None:
    chat = client(urls["qwen3"]).chat.completions
    whole = chat.create(model="qwen3", messages=MESSAGES, max_tokens=15, temperature=0)
    chunks = list(
        chat.create(
            model="qwen3",
            messages=MESSAGES,
            max_tokens=15,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    completions = client(urls["gpt"]).completions
    whole_text = (
        completions.create(model="gpt", prompt="The cat", max_tokens=20, temperature=0).choices[0].text
    )
    pieces = completions.create(model="gpt", prompt="The cat", max_tokens=20, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in pieces) == whole_text


def test_a_model_without_a_template_refuses_chat_but_completes(urls: dict) -> None:
    with pytest.raises(openai.BadRequestError, match="no chat template") as refused:
        client(urls["gpt"]).chat.completions.create(model="gpt", messages=MESSAGES[:2])
    assert refused.value.body["param"] == "messages"
    assert client(urls["gpt"]).completions.create(model="gpt", prompt="The cat", max_tokens=3).choices


def test_a_template_given_at_start_serves_chat(models: dict) -> None:
    template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    options = ServerOptions(model_name="gpt", chat_template=template)
    with background_server(create_app(models["gpt"], options=options)) as url:
        answer = client(url).chat.completions.create(
            model="gpt", messages=[{"role": "user", "content": "The cat"}], max_tokens=8, temperature=0
        )
    gpt = models["gpt"]
    expected = gpt.generate_ids([gpt.tokenizer.encode("The cat ")], max_new_tokens=8, temperature=0)[0]
    assert answer.choices[0].message.content == gpt.tokenizer.decode(expected.tokens)


REFUSED = [
    ("gpt", "completions", {"model": "gpt", "prompt": "a", "n": 2}, 400, "n"),
    ("gpt", "completions", {"model": "gpt", "prompt": "a", "logit_bias": {"5": 10}}, 400, "logit_bias"),
    ("gpt", "completions", {"model": "gpt", "prompt": "a", "presence_penalty": 0.5}, 400, "presence_penalty"),
    ("gpt", "completions", {"model": "gpt", "prompt": "a", "temperature": 3}, 400, "temperature"),
    ("gpt", "completions", {"model": "gpt", "prompt": "a", "max_tokens": 100000}, 400, "max_tokens"),
    ("gpt", "completions", {"model": "gpt", "prompt": [1, 2, 3]}, 400, "prompt"),
    ("gpt", "completions", {"model": "gpt", "prompt": "a", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ("gpt", "completions", {"model": "gpt", "prompt": "a", "frobnicate": 1}, 400, "frobnicate"),
    ("gpt", "completions", {"model": "other", "prompt": "a"}, 404, "model"),
    ("gpt", "completions", {"prompt": "a"}, 400, "model"),
    ("gpt", "completions", {"model": "gpt", "prompt": "word " * 400}, 400, "prompt"),
    ("gpt", "embeddings", {"model": "gpt", "input": "a"}, 400, None),
    ("bert", "embeddings", {"model": "bert", "input": "a", "dimensions": 8}, 400, "dimensions"),
    ("bert", "embeddings", {"model": "bert", "input": [[1, 2]]}, 400, "input"),
    ("bert", "chat/completions", {"model": "bert", "messages": MESSAGES}, 400, None),
    ("qwen3", "chat/completions", {"model": "qwen3", "messages": []}, 400, "messages"),
    (
        "qwen3",
        "chat/completions",
        {"model": "qwen3", "messages": [{"role": "robot", "content": "x"}]},
        400,
        "messages[0].role",
    ),
    (
        "qwen3",
        "chat/completions",
        {"model": "qwen3", "messages": MESSAGES, "tools": [{"type": "function"}]},
        400,
        "tools",
    ),
]


@pytest.mark.parametrize(("server", "route", "body", "status", "param"), REFUSED)
def test_refusals_have_openai_s_shape(urls: dict, server, route, body, status, param) -> None:
    code, answer, _ = post(f"{urls[server]}/v1/{route}", body)
    print(answer)
    assert code == status
    assert set(answer["error"]) == {"message", "type", "param", "code"} and answer["error"]["message"]
    assert answer["error"]["param"] == param
    assert answer["error"]["type"] == "invalid_request_error"


def slowed(model, seconds: float):
    """The same model with every decoder step `seconds` longer (this instance only): a generation that
    lasts long enough to be interrupted, queued behind, or drained."""
    step = model._step

    def slow(*args, **kwargs):
        time.sleep(seconds)
        return step(*args, **kwargs)

    model._step = slow
    return model


def metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        text = response.read().decode()
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name)]
    return sum(values)


def test_a_full_queue_answers_503_and_every_accepted_request_is_right() -> None:
    model = slowed(load(EXPORTED / "gpt"), 0.01)
    settings = BatchSettings(max_batch=2, max_queue=2, max_wait_ms=0)
    prompts = texts(12, seed=9)
    with background_server(
        create_app(model, options=ServerOptions(model_name="gpt", batching=settings))
    ) as url:
        body = lambda p: {"model": "gpt", "prompt": p, "max_tokens": 20, "temperature": 0}  # noqa: E731
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda p: post(url + "/v1/completions", body(p)), prompts))
        rejected = metric(url, 'onnxformer_rejected_total{batcher="generations"}')
    refused = [a for a in answers if a[0] == 503]
    accepted = [(p, a) for p, a in zip(prompts, answers, strict=True) if a[0] == 200]
    print(f"{len(accepted)} accepted, {len(refused)} refused with 503")
    assert refused and accepted and len(refused) + len(accepted) == 12 and rejected == len(refused)
    for _, answer, headers in refused:
        assert headers["Retry-After"] == "1" and answer["error"]["code"] == "overloaded"
    for prompt, (_, answer, _) in accepted:
        assert answer["choices"][0]["text"] == model.generate(prompt, max_new_tokens=20, temperature=0)


def test_a_request_past_its_time_limit_answers_504() -> None:
    model = slowed(load(EXPORTED / "gpt"), 0.1)
    body = {"model": "gpt", "prompt": "The", "max_tokens": 60, "temperature": 0}
    steps = len(model.generate_ids([model.frame("The")], max_new_tokens=60, temperature=0)[0].tokens)
    assert steps >= 6  # greedy runs >= 0.6 s here, past the 0.3 s limit
    settings = BatchSettings(timeout_s=0.3)
    with background_server(
        create_app(model, options=ServerOptions(model_name="gpt", batching=settings))
    ) as url:
        before = metric(url, "onnxformer_generated_tokens_total")
        code, answer, _ = post(url + "/v1/completions", body)
        assert (code, answer.get("error", {}).get("code")) == (504, "timeout"), answer
        time.sleep(0.3)  # the cancelled row stops at its next step
        tokens = metric(url, "onnxformer_generated_tokens_total") - before
    assert tokens < steps, f"the generation went on after its request timed out ({tokens} tokens)"


def test_a_client_that_goes_away_stops_its_generation() -> None:
    model = slowed(load(EXPORTED / "gpt"), 0.02)
    with background_server(create_app(model, options=ServerOptions(model_name="gpt"))) as url:
        stream = client(url).completions.create(
            model="gpt",
            prompt="The",
            max_tokens=60,
            temperature=1.0,
            seed=1,
            stream=True,
            stop=["\u2603"],  # never generated: the whole budget is asked for
        )
        next(iter(stream))
        stream.close()
        time.sleep(0.5)  # its next steps notice
        tokens = metric(url, "onnxformer_generated_tokens_total")
    print(f"the dropped stream generated {tokens} tokens of 60")
    assert 0 < tokens < 30


def test_concurrent_embeddings_run_as_batches(models: dict) -> None:
    model = load(EXPORTED / "bert")
    run = model._run

    def slow(*args, **kwargs):
        time.sleep(0.05)  # requests pile up while a batch runs
        return run(*args, **kwargs)

    model._run = slow
    requests = [texts(2, seed=s) for s in range(16)]
    with background_server(create_app(model, options=ServerOptions(model_name="bert"))) as url:
        with ThreadPoolExecutor(16) as pool:
            answers = list(
                pool.map(lambda items: client(url).embeddings.create(model="bert", input=items), requests)
            )
        batches = metric(url, 'onnxformer_batch_rows_count{batcher="embeddings"}')
        rows = metric(url, 'onnxformer_batch_rows_sum{batcher="embeddings"}')
        served = metric(url, 'onnxformer_requests_total{route="/v1/embeddings",status="200"}')
    print(f"{rows:.0f} texts in {batches:.0f} batches")
    assert rows == 32 and served == 16 and batches <= 8
    alone = np.concatenate([models["bert"].embed(items) for items in requests])
    got = np.array([item.embedding for answer in answers for item in answer.data], dtype=np.float32)
    allowed = embedding_allowance(EXPORTED / "bert", alone)
    print(f"max |batched - alone| = {np.abs(got - alone).max():.3g} (allowed {allowed:.3g})")
    assert np.abs(got - alone).max() <= allowed


def test_metrics_are_prometheus_text(urls: dict) -> None:
    client(urls["bert"]).embeddings.create(model="bert", input="a")
    with urllib.request.urlopen(urls["bert"] + "/metrics", timeout=30) as response:
        text = response.read().decode()
        assert response.headers["content-type"].startswith("text/plain")
    for name in ("onnxformer_requests_total", "onnxformer_request_seconds_bucket", "onnxformer_queue_depth",
                 "onnxformer_batch_rows_bucket", "onnxformer_generated_tokens_total"):  # fmt: skip
        assert f"\n{name}" in text or text.startswith(name), name


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_sigterm_drains_the_requests_in_flight(tmp_path: Path) -> None:
    port = _free_port()
    command = [sys.executable, "-m", "onnxformer", "serve", str(EXPORTED / "gpt"), "--port", str(port),
               "--no-batching", "--model-name", "gpt"]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "the server did not start"
                time.sleep(0.1)
        prompts = [start + " " + word for start in ("The", "A", "Once") for word in SENTENCE.split()[:32]]
        answered: list = []
        refused: list = []
        first = threading.Event()

        def ask(prompt: str) -> None:
            body = {"model": "gpt", "prompt": prompt, "max_tokens": 60, "temperature": 0}
            try:
                answered.append((prompt, post(url + "/v1/completions", body)))
            except OSError as error:  # still in the listen backlog when the socket closed: never accepted
                refused.append(error)
            first.set()

        threads = [threading.Thread(target=ask, args=(p,)) for p in prompts]
        for thread in threads:
            thread.start()
        assert first.wait(60)
        server.send_signal(signal.SIGTERM)
        done_before = len(answered)
        for thread in threads:
            thread.join(60)
        # uvicorn raises the signal again once it has shut down, so the exit is SIGTERM's own.
        assert server.wait(60) in (0, -signal.SIGTERM)
        with pytest.raises(OSError):
            urllib.request.urlopen(url + "/health", timeout=5)
    finally:
        if server.poll() is None:
            server.kill()
    drained = len(answered) - done_before
    print(f"{done_before} answered before SIGTERM, {drained} after it (drained), {len(refused)} refused")
    assert drained > 0 and len(answered) + len(refused) == len(prompts)
    model = load(EXPORTED / "gpt")
    for prompt, (code, answer, _) in answered:  # every accepted request answered in full, none cut off
        assert code == 200
        assert answer["choices"][0]["text"] == model.generate(prompt, max_new_tokens=60, temperature=0)


def test_the_serve_command_takes_a_chat_template(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from onnxformer.cli.main import app

    result = CliRunner().invoke(
        app, ["serve", str(EXPORTED / "gpt"), "--chat-template", str(tmp_path / "no")]
    )
    assert result.exit_code != 0 and "--chat-template" in result.output and "cannot read" in result.output
    assert os.path.exists(EXPORTED / "gpt")


def test_the_chat_command_streams_replies_with_the_template(qwen3: tuple[Path, Path], models: dict) -> None:
    _, export = qwen3
    model = models["qwen3"]
    script = "Cat?\n/reset\nDog?\n/exit\nnever read\n"
    command = [sys.executable, "-m", "onnxformer", "chat", str(export), "--temperature", "0",
               "--max-new-tokens", "6", "--system", "Be brief."]  # fmt: skip
    done = subprocess.run(command, input=script, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    from onnxformer.runtime.conversation import model_template

    template = model_template(model)
    replies = []
    for text in ("Cat?", "Dog?"):  # /reset: the second turn starts afresh
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]
        ids = model.tokenizer.encode(template.render(messages))
        result = model.generate_ids([ids], max_new_tokens=6, temperature=0)[0]
        replies.append(model.tokenizer.decode(result.tokens))
    assert done.stdout == "".join(reply + "\n" for reply in replies)


def test_a_long_chat_drops_its_oldest_turns(models: dict) -> None:
    from onnxformer.runtime.conversation import Conversation, model_template
    from onnxformer.runtime.generation_options import GenerationOptions

    model = models["qwen3"]
    chat = Conversation(model, model_template(model), system="Be brief.",
                        options=GenerationOptions(max_new_tokens=8, temperature=0))  # fmt: skip
    for turn in range(12):
        "".join(chat.say(f"Message number {turn}?"))
    assert chat.dropped > 0 and chat.turns[0]["role"] == "user"
    assert chat.turns[-2]["content"] == "Message number 11?"
    prompt = model.tokenizer.encode(chat.template.render(chat.system + chat.turns[:-1]))
    assert len(prompt) <= model.max_len - 8
    with pytest.raises(InputError, match="send a shorter message"):
        "".join(chat.say("word " * 200))
    assert chat.turns[-2]["content"] == "Message number 11?"  # the refused message left no trace


def test_a_model_that_fails_answers_500_in_openai_s_shape_and_the_server_goes_on() -> None:
    model = load(EXPORTED / "gpt")
    step = model._step
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : a kernel failed")
        return step(*args, **kwargs)

    model._step = broken  # this instance only: the first step fails, the next ones run
    with background_server(create_app(model, options=ServerOptions(model_name="gpt"))) as url:
        body = {"model": "gpt", "prompt": "The cat", "max_tokens": 5, "temperature": 0}
        code, answer, _ = post(url + "/v1/completions", body)
        assert code == 500 and answer["error"]["type"] == "server_error"
        assert (
            "the model failed" in answer["error"]["message"] and "RuntimeError" in answer["error"]["message"]
        )
        code, answer, _ = post(url + "/v1/completions", body)  # the worker started afresh
        assert code == 200 and answer["choices"][0]["text"] == load(EXPORTED / "gpt").generate(
            "The cat", max_new_tokens=5, temperature=0
        )
