"""The browser host (hosts/web) in a real browser: Debian's chromium driven by Playwright, the page served
from 127.0.0.1 by hosts/web/serve.py. Through the page's own controls (clicks and typing): every golden of
the three reference exports passes in the page, a generation streams, text to text and sentence
similarity give what the Python runtime gives, and the attention highlighter shows the weights the Python
runtime reads, its screenshot neither blank nor unchanged when another token is clicked.

Needs /usr/bin/chromium (`apt-get install chromium`; .ci/run installs it), the `playwright` package (the
`dev` extra; never `playwright install`, the system chromium is used) and hosts/node/node_modules (`npm ci`
there, run here when missing). Without them the tests fail and say what to install; they never skip.
"""

import importlib.util
import io
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from onnxformer.runtime import TextEncoder, TextGenerator, TextToText
from onnxformer.runtime.attention import attention_map

ROOT = Path(__file__).resolve().parents[1]
EXPORTED = ROOT / "exported"
NODE_HOST = ROOT / "hosts" / "node"
CHROMIUM = Path(os.environ.get("ONNXFORMER_CHROMIUM", "/usr/bin/chromium"))
SENTENCE = "The cat sat on the mat."
WAIT_MS = 60_000  # the longest any one step may take in the page (the T5 goldens take ~6 s)


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
            executable_path=str(CHROMIUM), args=["--no-sandbox"], headless=True, timeout=WAIT_MS
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser, site: str) -> Iterator[object]:
    """A fresh page of the site; an uncaught error in it fails the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(site)
        page.wait_for_selector("body[data-ready=true]")
        yield page
        assert errors == [], errors
    finally:
        context.close()


def open_folder(page, family: str) -> None:
    page.click(f"button[data-folder='../../exported/{family}/']")
    page.wait_for_function("['ready', 'error'].includes(document.getElementById('status').dataset.state)")
    status = page.locator("#status")
    assert status.get_attribute("data-state") == "ready", status.text_content()
    assert status.get_attribute("data-family") == family


def wait_done(page, selector: str) -> None:
    page.wait_for_function(
        "([s]) => document.querySelector(s).dataset.state === 'done'"
        " || document.getElementById('status').dataset.state === 'error'",
        arg=[selector],
    )
    assert page.locator(selector).get_attribute("data-state") == "done", page.text_content("#status")


@pytest.mark.parametrize("family", ["gpt", "bert", "t5"])
def test_goldens_pass_in_the_page(page, family: str) -> None:
    open_folder(page, family)
    page.click("#run-goldens")
    wait_done(page, "#goldens-summary")
    summary = page.locator("#goldens-summary")
    passed, failed = int(summary.get_attribute("data-passed")), int(summary.get_attribute("data-failed"))
    graph_diff = float(summary.get_attribute("data-graph-max-diff"))
    print(f"{family} in chromium ({page.get_attribute('#status', 'data-engine')}): {summary.text_content()}")
    assert failed == 0, page.locator("#goldens-table tr.fail").all_text_contents()[:5]
    # every output of every graph case the manifest lists, then its end-to-end checks
    goldens = json.loads((EXPORTED / family / "manifest.json").read_text())["goldens"]["graphs"]
    outputs = sum(len(case["outputs"]) for graph in goldens for case in graph["cases"])
    assert int(summary.get_attribute("data-graph-checks")) == outputs
    assert passed > outputs
    assert 0.0 < graph_diff < 1e-4
    share = float(summary.get_attribute("data-graph-max-share"))
    print(f"{family} in chromium: {share:.0%} of the largest allowance")
    assert 0.0 < share <= 1.0


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


def test_text_to_text_and_similarity_through_the_ui(page) -> None:
    open_folder(page, "t5")
    page.fill("#prompt", "The cat chased the dog.")
    page.click("#generate")
    wait_done(page, "#output")
    assert page.text_content("#output") == TextToText.load(EXPORTED / "t5", device="cpu").generate(
        "The cat chased the dog."
    )

    open_folder(page, "bert")
    lines = ["the cat sat on the mat.", "a cat sat on a mat.", "the dog chased the ball."]
    page.fill("#sentences", "\n".join(lines))
    page.click("#compare")
    page.wait_for_selector("#similarities tr:nth-child(3)")
    shown = {
        row.locator("td").nth(1).text_content(): float(row.locator("td").nth(0).text_content())
        for row in page.locator("#similarities tr").all()[1:]
    }
    vectors = TextEncoder.load(EXPORTED / "bert", device="cpu").embed(lines)  # (3, D)
    for line, vector in zip(lines[1:], vectors[1:], strict=True):
        cosine = float(vectors[0] @ vector / np.linalg.norm(vectors[0]) / np.linalg.norm(vector))
        assert abs(shown[line] - cosine) < 1e-3, (line, shown[line], cosine)


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
