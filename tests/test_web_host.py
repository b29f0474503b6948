"""The browser host (hosts/web) in a real browser: Debian's chromium driven by Playwright, the page served
from 127.0.0.1 by hosts/web/serve.py. Through the page's own controls (clicks and typing), on both of its
engines, WebAssembly and WebGPU: every golden of the three reference exports and of imported Hugging Face
models passes in the page, and greedy generation, text to text and sentence embeddings give what the
Python runtime gives. On WebAssembly also: a generation streams, seeded samples are the Python runtime's,
and the attention highlighter shows the weights the Python runtime reads, its screenshot neither blank nor
unchanged when another token is clicked.

WebGPU comes from SwiftShader (Chromium's CPU implementation of Vulkan: WEBGPU_FLAGS), so it runs on a
machine without a GPU. A WebGPU test proves the engine had it: the page names the adapter ONNX Runtime made
its device on, and ONNX Runtime's own log of where it placed each node shows every MatMul and Softmax on
its WebGPU execution provider (a missing adapter fails session creation; nothing falls back silently).

Needs /usr/bin/chromium (`apt-get install chromium`; .ci/run installs it), the `playwright` package (the
`dev` extra; never `playwright install`, the system chromium is used) and hosts/node/node_modules (`npm ci`
there, run here when missing). Without them the tests fail and say what to install; they never skip.
With `-s` the module prints its figures as the README's engine-table rows.
"""

import importlib.util
import io
import json
import os
import re
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from onnxformer.runtime import TextEncoder, TextGenerator, TextToText
from onnxformer.runtime.attention import attention_map

ROOT = Path(__file__).resolve().parents[1]
EXPORTED = ROOT / "exported"
NODE_HOST = ROOT / "hosts" / "node"
CHROMIUM = Path(os.environ.get("ONNXFORMER_CHROMIUM", "/usr/bin/chromium"))
SENTENCE = "The cat sat on the mat."
WAIT_MS = 120_000  # the longest one step may take in the page (T5's goldens on WebGPU: 14 s, 32 s when busy)
ENGINES = ["wasm", "webgpu"]
# A WebGPU adapter in headless Chromium without a GPU: SwiftShader's (served to a secure context only:
# the page comes from 127.0.0.1).
WEBGPU_FLAGS = ["--enable-unsafe-webgpu", "--use-webgpu-adapter=swiftshader", "--enable-unsafe-swiftshader"]
GPU_WORK = {"MatMul", "Gemm", "Softmax"}  # the nodes a WebGPU session must run on its WebGPU provider
# Imported Hugging Face architectures (tests/conftest.py HF_EXPORTS): GPT-2 (learned positions) and Qwen3
# (rotary positions whose cos and sin the graph computes, QK-norm, grouped-query attention).
IMPORTED = ["gpt2", "qwen3"]


class GoldensFailed(AssertionError):
    """Some golden of the opened export failed in the page."""


class Figure(NamedTuple):
    passed: bool
    share: float  # the largest share of its allowance any graph golden output took (1: at the limit)
    ms: int  # the goldens' time in the page


def _load_server_module():
    spec = importlib.util.spec_from_file_location("onnxformer_web_serve", ROOT / "hosts" / "web" / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """The repository served on a free port of 127.0.0.1, stopped when the module's tests end."""
    if not (NODE_HOST / "node_modules" / "onnxruntime-web").is_dir():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NODE_HOST,
            env={**os.environ, "ONNXRUNTIME_NODE_INSTALL": "skip"},
            check=True,
            timeout=600,
        )
    server = _load_server_module().make_server(port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hosts/web/?threads=1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(
            'playwright is missing: pip install -c constraints.txt -e ".[dev]" (no `playwright install`)'
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", *WEBGPU_FLAGS],
            headless=True,
            timeout=WAIT_MS,
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def figures(browser) -> Iterator[dict[tuple[str, str], Figure]]:
    """(export, engine) -> its goldens' figures, printed when the module ends as the README's table rows."""
    seen: dict[tuple[str, str], Figure] = {}
    yield seen
    if not seen:
        return
    ort = json.loads((NODE_HOST / "node_modules" / "onnxruntime-web" / "package.json").read_text())["version"]
    where = f"onnxruntime-web {ort.rsplit('.', 1)[0]} in Chromium"
    rows = {
        "wasm": f"{where} ([hosts/web](hosts/web), wasm, `tests/test_web_host.py`)",
        "webgpu": f"{where}, WebGPU on SwiftShader ([hosts/web](hosts/web))",
    }

    def cell(figure: Figure | None) -> str:
        return "-" if figure is None else f"{'pass' if figure.passed else 'fail'}, {figure.share:.0%}"

    print(f"\nthe largest share of its allowance any graph golden output took (Chromium {browser.version}):")
    print("| engine | gpt | bert | t5 |")
    for engine, row in rows.items():
        print(
            f"| {row} | "
            + " | ".join(cell(seen.get((name, engine))) for name in ("gpt", "bert", "t5"))
            + " |"
        )
    print(f"| imported Hugging Face models | {' | '.join(IMPORTED)} |")
    for engine, row in rows.items():
        print(f"| {row} | " + " | ".join(cell(seen.get((name, engine))) for name in IMPORTED) + " |")
    for engine in ENGINES:
        times = [f"{label} {figure.ms / 1000:.1f} s" for (label, on), figure in seen.items() if on == engine]
        print(f"goldens' time in the page on {engine}: {', '.join(times)}")


@pytest.fixture
def page(browser, site: str) -> Iterator[object]:
    """A fresh page of the site, its engine set to wasm; an uncaught error in it fails the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(site)
        page.wait_for_selector("body[data-ready=true]")
        page.select_option("#engine", "wasm")  # not "auto", which takes WebGPU where there is an adapter
        yield page
        assert errors == [], errors
    finally:
        context.close()


class Placements:
    """Where ONNX Runtime placed the nodes of each session the page creates (execution provider -> op types),
    read from its verbose session log: the test raises the sessions' log level (the engine's module is the
    page's own, so its sessions are the page's); nothing else about them changes."""

    def __init__(self, page, engine: str) -> None:
        self.engine = engine
        self.sessions: list[dict[str, Counter[str]]] = []
        self.provider = ""
        page.on("console", self._read)
        module = "onnxruntime-web/webgpu" if engine == "webgpu" else "onnxruntime-web"
        page.evaluate(
            """async (module) => {
                 const ort = await import(module);
                 const create = ort.InferenceSession.create;
                 ort.InferenceSession.create = (bytes, options) =>
                   create.call(ort.InferenceSession, bytes, { ...options, logSeverityLevel: 0 });
               }""",
            module,
        )

    def _read(self, message) -> None:
        text = message.text
        if text.endswith("VerifyEachNodeIsAssignedToAnEp] Node placements"):
            self.sessions.append({})
        elif placed := re.search(r"(All nodes|Node\(s\)) placed on \[(\w+)\]\. Number of nodes: (\d+)", text):
            self.provider = placed[2]
            nodes = self.sessions[-1].setdefault(self.provider, Counter())
            if placed[1] == "All nodes":  # one provider: ONNX Runtime lists no nodes
                nodes["(every node)"] = int(placed[3])
        elif node := re.search(r"VerifyEachNodeIsAssignedToAnEp\]   (\w+) \(", text):
            self.sessions[-1][self.provider][node[1]] += 1

    def check(self) -> str:
        """Fail unless every session ran on the engine's provider (WebGPU: every MatMul, Gemm and Softmax);
        a line saying where the nodes went."""
        assert self.sessions, "no session logged where ONNX Runtime placed its nodes"
        for session in self.sessions:
            if self.engine == "wasm":
                assert set(session) == {"CPUExecutionProvider"}, session
                continue
            elsewhere = {
                op for provider, ops in session.items() if provider != "WebGpuExecutionProvider" for op in ops
            }
            assert session.get("WebGpuExecutionProvider") and not elsewhere & GPU_WORK, session
        total = Counter[str]()
        for session in self.sessions:
            for provider, ops in session.items():
                total[provider] += sum(ops.values())
        on_cpu = sorted({op for session in self.sessions for op in session.get("CPUExecutionProvider", ())})
        cpu = f" ({', '.join(on_cpu)})" if self.engine == "webgpu" else ""
        return (
            f"{len(self.sessions)} sessions: "
            + ", ".join(f"{n} nodes on {p}" for p, n in total.items())
            + cpu
        )


def use_engine(page, engine: str) -> Placements:
    """Choose the page's engine (its selector) for the folders opened next."""
    page.select_option("#engine", engine)
    return Placements(page, engine)


def wait_opened(page, family: str | None = None) -> None:
    page.wait_for_function("['ready', 'error'].includes(document.getElementById('status').dataset.state)")
    status = page.locator("#status")
    assert status.get_attribute("data-state") == "ready", status.text_content()
    if family is not None:
        assert status.get_attribute("data-family") == family
    engine = page.input_value("#engine")
    assert status.get_attribute("data-engine") == engine, status.text_content()
    if engine == "webgpu":  # the adapter ONNX Runtime's WebGPU device is on
        assert status.get_attribute("data-adapter") == "google swiftshader", status.text_content()


def open_folder(page, family: str) -> None:
    page.click(f"button[data-folder='../../exported/{family}/']")
    wait_opened(page, family)


def pick_folder(page, folder: Path) -> None:
    """Open an export folder anywhere on this machine by the page's folder picker."""
    page.set_input_files("#folder-pick", str(folder))
    wait_opened(page)


def wait_done(page, selector: str) -> None:
    page.wait_for_function(
        "([s]) => document.querySelector(s).dataset.state === 'done'"
        " || document.getElementById('status').dataset.state === 'error'",
        arg=[selector],
    )
    assert page.locator(selector).get_attribute("data-state") == "done", page.text_content("#status")


def run_goldens(page, label: str, manifest: dict, figures: dict[tuple[str, str], Figure]) -> list[str]:
    """Run the opened export's goldens by the page's button and record its figures; the rows of the checks
    that failed."""
    page.click("#run-goldens")
    wait_done(page, "#goldens-summary")
    summary = page.locator("#goldens-summary")
    engine = page.get_attribute("#status", "data-engine")
    passed, failed = int(summary.get_attribute("data-passed")), int(summary.get_attribute("data-failed"))
    share = float(summary.get_attribute("data-graph-max-share"))
    figures[label, engine] = Figure(failed == 0, share, int(summary.get_attribute("data-ms")))
    print(f"{label} in chromium: {summary.text_content()}")
    # every output of every graph case the manifest lists, then its end-to-end checks
    outputs = sum(len(case["outputs"]) for graph in manifest["goldens"]["graphs"] for case in graph["cases"])
    assert int(summary.get_attribute("data-graph-checks")) == outputs
    assert passed + failed > outputs
    assert float(summary.get_attribute("data-graph-max-diff")) > 0.0  # the outputs were compared
    failures = page.locator("#goldens-table tr.fail").all_text_contents()
    assert len(failures) == failed
    if not failures:
        assert 0.0 < share <= 1.0
    return failures


def generate_greedy(page, prompt: str, max_new_tokens: int | None = None) -> str:
    """The opened export's greedy output for `prompt` by the page's controls (the export's default length
    when `max_new_tokens` is None)."""
    page.fill("#prompt", prompt)
    if max_new_tokens is not None:
        page.fill("#max-new-tokens", str(max_new_tokens))
    page.fill("#temperature", "0")
    page.click("#generate")
    wait_done(page, "#output")
    assert int(page.get_attribute("#output", "data-tokens")) > 0
    return page.text_content("#output")


def check_task(page, folder: Path, manifest: dict) -> str:
    """The opened export's task in the page against the Python runtime: greedy tokens exactly, sentence
    embeddings within the tolerance of the export's embedding goldens; a line saying what was compared."""
    if manifest["task"] == "generate":
        expected = TextGenerator.load(folder, device="cpu").generate(
            "The cat", max_new_tokens=12, temperature=0.0
        )
        assert generate_greedy(page, "The cat", 12) == expected
        return "greedy generation (12 tokens) equals the Python runtime's"
    if manifest["task"] == "seq2seq":
        expected = TextToText.load(folder, device="cpu").generate("The cat chased the dog.")
        assert generate_greedy(page, "The cat chased the dog.") == expected
        return "greedy text to text equals the Python runtime's"
    lines = ["the cat sat on the mat.", "a cat sat on a mat.", "the dog chased the ball."]
    page.fill("#sentences", "\n".join(lines))
    page.click("#compare")
    page.wait_for_selector("#similarities tr:nth-child(3)")
    shown = {
        row.locator("td").nth(1).text_content(): float(row.locator("td").nth(0).text_content())
        for row in page.locator("#similarities tr").all()[1:]
    }
    vectors = TextEncoder.load(folder, device="cpu").embed(lines)  # (3, D)
    for line, vector in zip(lines[1:], vectors[1:], strict=True):
        cosine = float(vectors[0] @ vector / np.linalg.norm(vectors[0]) / np.linalg.norm(vector))
        assert abs(shown[line] - cosine) < 1e-3, (line, shown[line], cosine)
    # The vectors themselves, from the model the page opened (its console handle).
    embedded = np.array(
        page.evaluate(
            "(lines) => window.onnxformer.model.embed(lines).then((v) => v.map((x) => Array.from(x)))", lines
        )
    )  # (3, D)
    tolerance = json.loads((folder / manifest["goldens"]["end_to_end"]).read_text())["embeddings"]
    difference = float(np.abs(embedded - vectors).max())
    allowed = tolerance["atol"] + tolerance["rtol"] * float(np.abs(vectors).max())
    assert difference <= allowed, (
        f"embeddings {difference:.2e} from the Python runtime's, {allowed:.2e} allowed"
    )
    return f"embeddings within {difference:.2e} of the Python runtime's ({allowed:.2e} allowed)"


@pytest.mark.parametrize(
    ("engine", "name"),
    [
        *[(engine, name) for engine in ENGINES for name in ["gpt", "bert", "t5", "gpt2"]],
        # Not on WebGPU: its Sin and Cos are 1.9e-4 off on SwiftShader, which the rotary position tables
        # carry into every rotated key, far past the goldens' allowances (hosts/web/README.md, WebGPU).
        ("wasm", "qwen3"),
    ],
)
def test_an_export_in_the_page(page, figures, request, engine: str, name: str) -> None:
    """A reference export (its button) or an imported one (picked from outside the served folder) on one of
    the page's engines: its task gives the Python runtime's output, then every golden passes. The imported
    exports are tests/conftest.py's, built once a session."""
    placements = use_engine(page, engine)
    if name in IMPORTED:
        folder = request.getfixturevalue("hf_exports")[name][1]
        pick_folder(page, folder)
    else:
        folder = EXPORTED / name
        open_folder(page, name)
    manifest = json.loads((folder / "manifest.json").read_text())
    print(f"{name} on {engine}: {check_task(page, folder, manifest)}")
    failures = run_goldens(page, name, manifest, figures)
    print(f"{name} on {engine}: {placements.check()}")
    if failures:
        raise GoldensFailed(f"{len(failures)} goldens of {name} failed on {engine}: {failures[:5]}")


def test_generation_streams_and_samples_through_the_ui(page) -> None:
    open_folder(page, "gpt")
    page.fill("#prompt", "")
    page.type("#prompt", "The cat")
    page.fill("#max-new-tokens", "12")
    page.fill("#temperature", "0")
    # Every text the output shows while it grows, to see the tokens stream in.
    page.evaluate(
        """() => { window.seen = []; new MutationObserver(() => window.seen.push(
             document.getElementById('output').textContent)).observe(
             document.getElementById('output'), {childList: true, characterData: true, subtree: true}); }"""
    )
    page.click("#generate")
    wait_done(page, "#output")
    greedy = page.text_content("#output")
    gpt = TextGenerator.load(EXPORTED / "gpt", device="cpu")
    assert greedy == gpt.generate("The cat", max_new_tokens=12, temperature=0.0)
    seen = [text for text in page.evaluate("window.seen") if text]
    assert len(seen) >= 2 and seen[-1] == greedy  # several texts on the way, not one at the end
    assert all(greedy.startswith(text) for text in seen)

    def sample(seed: int) -> str:
        page.fill("#temperature", "1.2")
        page.fill("#top-k", "8")
        page.fill("#top-p", "0.95")
        page.fill("#seed", str(seed))
        page.click("#generate")
        wait_done(page, "#output")
        assert int(page.get_attribute("#output", "data-tokens")) > 0
        return page.text_content("#output")

    # numpy's draws for the seed, the Python runtime's sampler step for step: the same tokens.
    options = {"max_new_tokens": 12, "temperature": 1.2, "top_k": 8, "top_p": 0.95}
    samples = {seed: sample(seed) for seed in (7, 8, 9)}
    assert samples == {seed: gpt.generate("The cat", seed=seed, **options) for seed in samples}
    assert len(set(samples.values())) > 1


def highlight(page) -> dict[int, float]:
    """The weight each token's highlight shows, by token index."""
    tokens = page.locator("#tokens .token")
    return {
        int(tokens.nth(i).get_attribute("data-index")): float(tokens.nth(i).get_attribute("data-weight"))
        for i in range(tokens.count())
    }


def test_attention_highlighter_through_the_ui(page, tmp_path: Path) -> None:
    from PIL import Image

    open_folder(page, "bert")
    page.fill("#attention-text", "")
    page.type("#attention-text", SENTENCE)
    page.click("#show-attention")
    page.wait_for_selector("#tokens .token")
    expected = attention_map(EXPORTED / "bert", SENTENCE, device="cpu")
    assert page.locator("#tokens .token").count() == len(expected.query_tokens)

    pictures = []
    for word in ["cat", "mat"]:
        page.locator("#tokens .token", has_text=word).first.click()
        index = expected.query_index(word)
        assert page.get_attribute("#attention-caption", "data-query") == str(index)
        shown = highlight(page)
        row = expected.row(index)  # averaged over layers and heads, as the page starts
        assert max(abs(shown[k] - float(row[k])) for k in shown) < 1e-5
        path = tmp_path / f"highlighter-{word}.png"
        page.locator("#highlighter").screenshot(path=path)
        pictures.append(np.asarray(Image.open(io.BytesIO(path.read_bytes())).convert("RGB")))

    cat, mat = pictures
    assert cat.shape == mat.shape and cat.shape[0] > 100 and cat.shape[1] > 300
    assert len(np.unique(cat.reshape(-1, 3), axis=0)) > 20  # not blank: the heatmap's colours
    changed = np.any(cat != mat, axis=-1).mean()
    assert changed > 0.001, f"only {changed:.2%} of the pixels changed when another token was clicked"

    # A click on the heatmap's panel of layer 1, head 2 highlights by that head alone.
    width, height, gap = (
        int(page.get_attribute("#heatmap", f"data-{key}")) for key in ("panel-width", "panel-height", "gap")
    )
    page.click(
        "#heatmap", position={"x": gap + 2 * (width + gap) + width // 2, "y": gap + (height + gap) + 5}
    )
    assert (page.input_value("#layer"), page.input_value("#head")) == ("1", "2")
    row = expected.row(expected.query_index("mat"), layer=1, head=2)
    shown = highlight(page)
    assert max(abs(shown[k] - float(row[k])) for k in shown) < 1e-5
    if os.environ.get("ONNXFORMER_WRITE_DOCS") == "1":  # refresh docs/highlighter.png
        page.locator("#tokens .token", has_text="cat").first.click()
        page.locator("#attention-section").screenshot(path=ROOT / "docs" / "highlighter.png")


def test_an_altered_file_is_refused_before_the_engine_sees_it(page) -> None:
    def flip_last_byte(route) -> None:
        body = bytearray(route.fetch().body())
        body[-1] ^= 1
        route.fulfill(status=200, body=bytes(body), headers={"content-type": "application/octet-stream"})

    page.route("**/exported/gpt/decoder.onnx", flip_last_byte)
    page.click("button[data-folder='../../exported/gpt/']")
    page.wait_for_function("document.getElementById('status').dataset.state === 'error'")
    message = page.text_content("#status")
    assert message.startswith("ManifestError: decoder.onnx does not match its sha256 in manifest.json"), (
        message
    )
    assert page.locator("#generate-section").is_hidden()

    page.unroute("**/exported/gpt/decoder.onnx")
    page.route("**/exported/gpt/tokenizer.json", lambda route: route.fulfill(status=404, body="gone"))
    page.click("button[data-folder='../../exported/gpt/']")
    page.wait_for_function("document.getElementById('status').dataset.state === 'error'")
    assert "tokenizer.json is listed in manifest.json but cannot be fetched (HTTP 404)" in page.text_content(
        "#status"
    )


def test_cross_attention_of_t5_through_the_ui(page) -> None:
    open_folder(page, "t5")
    page.select_option("#kind", "cross")  # shows the map at once
    page.wait_for_selector("#query-tokens .token")
    expected = attention_map(EXPORTED / "t5", SENTENCE, kind="cross", device="cpu")
    assert page.locator("#query-tokens .token").all_text_contents() == [
        token if token.startswith("<") else expected.query_pieces[i]
        for i, token in enumerate(expected.query_tokens)
    ]
    page.locator("#query-tokens .token", has_text="mat").first.click()
    index = expected.query_index("mat")
    assert page.get_attribute("#attention-caption", "data-query") == str(index)
    shown = highlight(page)
    assert len(shown) == len(expected.key_tokens)
    row = expected.row(index)
    assert max(abs(shown[k] - float(row[k])) for k in shown) < 1e-5


def test_an_optimized_folder_in_the_page(page, figures, optimized_gpt: dict[str, Path]) -> None:
    """An `optimize` folder runs in the page (onnxruntime-web binds no output, so the in-place graph runs
    with each step's presents fed back): Python's greedy tokens, every golden. Asked for WebGPU, whose
    fused attention kernels are wrong from 32 tokens a run, the page runs it on wasm and says so."""
    folder = optimized_gpt["fused"]  # tests/conftest.py's
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["kv_cache"]["layout"] == ["batch", "heads", "max_sequence", "head_dim"]
    use_engine(page, "wasm")
    pick_folder(page, folder)
    print(f"optimised gpt on wasm: {check_task(page, folder, manifest)}")
    failures = run_goldens(page, "gpt-optimized", manifest, figures)
    assert not failures, failures[:5]
    use_engine(page, "webgpu")
    page.set_input_files("#folder-pick", str(folder))
    page.wait_for_function(
        "(s => s.dataset.state === 'error' || (s.dataset.state === 'ready' &&"
        " s.textContent.includes('runs on wasm')))(document.getElementById('status'))"
    )
    status = page.locator("#status")
    assert status.get_attribute("data-state") == "ready", status.text_content()
    assert status.get_attribute("data-engine") == "wasm", status.text_content()
    assert "runs on wasm" in status.text_content()
