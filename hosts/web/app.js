/**
 * The page: open an export folder (every file the engine or the tokenizer gets is checked against the
 * manifest's sha256 first), run its goldens, run its task (generation with streamed tokens and sampling
 * options, text to text, sentence similarity) and look at its attention. Everything model-related is the
 * host library of hosts/node/src, run on this page's platform (platform.js).
 */

import { loadEngine } from "../node/src/engine.js";
import { OnnxformerError } from "../node/src/errors.js";
import { ExportFolder } from "../node/src/folder.js";
import { verifyFolder } from "../node/src/goldens.js";
import { openFolder } from "../node/src/open.js";

import { AttentionReader } from "./attention.js";
import { pickedFiles } from "./platform.js";

const $ = (id) => document.getElementById(id);
const PROMPTS = { generate: "The cat", seq2seq: "The cat chased the dog." };
const params = new URLSearchParams(location.search);
const state = { model: null, reader: null, map: null, query: 0, engines: new Map(), stopping: false, notice: "" };
window.onnxformer = state; // for a console; the tests drive the page through its controls

class Stopped extends Error {}

/** Run an action of the page, its errors shown in the status line. */
function action(run) {
  return async (event) => {
    event?.preventDefault();
    try {
      await run(event);
    } catch (error) {
      const typed = error instanceof OnnxformerError;
      setStatus(
        typed ? `${error.name}: ${error.message}` : `Unexpected error: ${error.stack ?? error}`,
        "error",
      );
      if (!typed) console.error(error);
    }
  };
}

function setStatus(text, stateName) {
  $("status").textContent = text;
  $("status").dataset.state = stateName;
}

async function engineName() {
  const chosen = $("engine").value;
  if (chosen !== "auto") return chosen;
  const adapter = await globalThis.navigator?.gpu?.requestAdapter?.().catch(() => null);
  return adapter ? "webgpu" : "wasm";
}

/**
 * A folder written by `onnxformer optimize` (fused GroupQueryAttention / MultiHeadAttention) runs on wasm:
 * onnxruntime-web 1.30's WebGPU attention kernels give wrong logits once a run has 32 tokens or more
 * (measured on SwiftShader, hosts/web/README.md), so its goldens would fail there.
 */
function fusedOnWebgpu(folder, name) {
  return name === "webgpu" && folder.manifest?.extra?.optimization?.fuse === true;
}

async function engine(folder) {
  let name = await engineName();
  state.notice = "";
  if (fusedOnWebgpu(folder, name)) {
    name = "wasm";
    state.notice = "; an optimised (fused) folder runs on wasm: WebGPU's fused attention is wrong past 31 tokens";
  }
  if (!state.engines.has(name)) {
    const threads = params.has("threads") ? Number(params.get("threads")) : undefined;
    state.engines.set(name, await loadEngine(name, { threads }));
  }
  return state.engines.get(name);
}

/**
 * The GPU adapter ONNX Runtime made its WebGPU device on ("google swiftshader", a vendor and an
 * architecture), or "none" while it has made none: the device, not navigator.gpu, says the engine has one.
 */
function adapterName(runner) {
  const info = runner.ort.env.webgpu.device?.adapterInfo;
  if (info === undefined) return "none";
  return [info.vendor, info.architecture].filter(Boolean).join(" ") || "unnamed";
}

async function openExport({ url, files }) {
  setStatus("Opening…", "busy");
  await state.reader?.release();
  await state.model?.close();
  Object.assign(state, { model: null, reader: null, map: null });
  for (const id of ["goldens-section", "generate-section", "similarity-section", "attention-section"]) {
    $(id).hidden = true;
  }
  const started = performance.now();
  const folder = await ExportFolder.open(url, { files });
  const runner = await engine(folder);
  const model = await openFolder(folder, { engine: runner });
  state.model = model;
  const manifest = model.manifest;
  state.reader = manifest.graphs?.attentions ? await AttentionReader.load(model) : null;
  const ms = Math.round(performance.now() - started);
  const sessions = Object.keys(model.graphs).length + (state.reader ? 1 : 0);
  const adapter = runner.name === "webgpu" ? adapterName(runner) : null;
  setStatus(
    `${folder.root}: ${manifest.family} (${manifest.task}) on ${runner.name}` +
      (adapter === null ? `, ${runner.ort.env.wasm.numThreads} thread(s)` : ` (adapter: ${adapter})`) +
      `; tokenizer and ${sessions} graph(s) checked against manifest.json's sha256 and loaded in ${ms} ms` +
      state.notice,
    "ready",
  );
  const shown = $("status").dataset;
  Object.assign(shown, { family: manifest.family, engine: runner.name, adapter: adapter ?? "" });
  $("goldens-section").hidden = false;
  $("goldens-summary").textContent = "";
  $("goldens-table").replaceChildren();
  if (manifest.task === "encode") {
    $("similarity-section").hidden = false;
  } else {
    $("generate-section").hidden = false;
    $("generate-title").textContent = manifest.task === "seq2seq" ? "Text to text" : "Generation";
    $("prompt").value = PROMPTS[manifest.task] ?? "";
    const defaults = model.generation;
    $("max-new-tokens").value = defaults.max_new_tokens;
    $("temperature").value = defaults.temperature ?? 0;
    $("top-k").value = defaults.top_k ?? 0;
    $("top-p").value = defaults.top_p ?? 1;
    $("output").textContent = "";
    $("output").dataset.state = "idle";
  }
  if (state.reader) {
    $("attention-section").hidden = false;
    fillLevels($("layer"), model.config.n_layers, "layer");
    fillLevels($("head"), model.config.n_heads, "head");
    const kinds = { self: "self-attention", cross: "cross-attention (the decoder over the source)" };
    $("kind").replaceChildren(...state.reader.kinds.map((kind) => new Option(kinds[kind], kind)));
    $("kind-label").hidden = state.reader.kinds.length < 2;
    $("query-tokens").replaceChildren();
    $("tokens").replaceChildren();
    const canvas = $("heatmap");
    canvas.getContext("2d").clearRect(0, 0, canvas.width, canvas.height);
    $("attention-caption").textContent = "";
  }
}

function fillLevels(select, count, what) {
  const options = [new Option(`average of ${count}`, "")];
  for (let i = 0; i < count; i++) options.push(new Option(`${what} ${i}`, String(i)));
  select.replaceChildren(...options);
}

async function runGoldens() {
  const summary = $("goldens-summary");
  summary.textContent = "Running…";
  summary.dataset.state = "busy";
  const started = performance.now();
  const report = await verifyFolder(state.model.folder, { engine: state.model.engine });
  const ms = Math.round(performance.now() - started);
  const passed = report.results.filter((result) => result.ok).length;
  const failed = report.results.length - passed;
  const diffs = report.results.map((result) => result.maxAbsDiff).filter((diff) => typeof diff === "number");
  const graphDiffs = report.results.filter((r) => r.check === "graph").map((r) => r.maxAbsDiff ?? Infinity);
  const maxDiff = Math.max(0, ...diffs);
  // The largest share of its allowance any graph output used (1 is at the limit; docs/goldens.md).
  const shares = report.results
    .filter((r) => r.check === "graph" && typeof r.maxAbsDiff === "number" && r.allowed > 0)
    .map((r) => r.maxAbsDiff / r.allowed);
  const graphMaxShare = Math.max(0, ...shares);
  summary.textContent =
    `${report.engine}: ${passed} passed, ${failed} failed in ${ms} ms (every file's sha256 checked); ` +
    `largest graph difference ${Math.max(0, ...graphDiffs).toExponential(2)}, ` +
    `${Math.round(graphMaxShare * 100)}% of its allowance at most`;
  Object.assign(summary.dataset, {
    state: "done",
    passed,
    failed,
    maxDiff,
    graphMaxDiff: Math.max(0, ...graphDiffs),
    graphMaxShare,
    graphChecks: graphDiffs.length,
    ms,
  });
  summary.className = failed === 0 ? "ok" : "fail";
  const rows = report.results.map((result) => {
    const row = document.createElement("tr");
    row.className = result.ok ? "ok" : "fail";
    const what = [result.file, result.label, result.output, result.text, result.prompt].filter(Boolean);
    const diff =
      typeof result.maxAbsDiff === "number"
        ? `${result.maxAbsDiff.toExponential(2)} <= ${result.allowed.toExponential(2)}`
        : "";
    for (const text of [
      result.ok ? "ok" : "FAIL",
      result.check,
      what.join(" · "),
      diff,
      result.detail ?? "",
    ]) {
      row.insertCell().textContent = text;
    }
    return row;
  });
  $("goldens-table").replaceChildren(...rows);
}

function number(id) {
  const value = Number($(id).value);
  if ($(id).value.trim() === "" || Number.isNaN(value)) throw new OnnxformerError(`${id} must be a number`);
  return value;
}

async function generate() {
  const model = state.model;
  const output = $("output");
  // The Python runtime's option names in camelCase, sampled as Python samples (hosts/node/src/sampling.js).
  const options = {
    maxNewTokens: number("max-new-tokens"),
    temperature: number("temperature"),
    topK: number("top-k"),
    topP: number("top-p"),
    ...($("seed").value.trim() === "" ? {} : { seed: number("seed") }),
  };
  state.stopping = false;
  $("generate").disabled = true;
  $("stop").disabled = false;
  output.textContent = "";
  output.dataset.state = "busy";
  output.dataset.tokens = "0";
  try {
    if (typeof model.stream === "function") {
      let pieces = 0;
      for await (const piece of model.stream($("prompt").value, options)) {
        output.textContent += piece;
        output.dataset.tokens = String(++pieces);
        await new Promise((resolve) => setTimeout(resolve, 0)); // let the page paint the piece
        if (state.stopping) throw new Stopped();
      }
      output.dataset.finish = "done";
    } else {
      const result = await model.generateIds(model.frame($("prompt").value), options);
      output.textContent = model.tokenizer.decode(result.tokens);
      output.dataset.tokens = String(result.tokens.length);
      output.dataset.finish = result.finishReason;
    }
  } catch (error) {
    if (!(error instanceof Stopped)) throw error;
    output.dataset.finish = "stopped";
  } finally {
    output.dataset.state = "done";
    $("generate").disabled = false;
    $("stop").disabled = true;
  }
}

async function compare() {
  const lines = $("sentences")
    .value.split("\n")
    .map((line) => line.trim())
    .filter(Boolean);
  if (lines.length < 2)
    throw new OnnxformerError("give at least two lines: a sentence, then those to compare");
  const vectors = await state.model.embed(lines);
  const rows = lines.slice(1).map((line, index) => {
    const row = document.createElement("tr");
    row.insertCell().textContent = cosine(vectors[0], vectors[index + 1]).toFixed(4);
    row.insertCell().textContent = line;
    return row;
  });
  rows.sort((a, b) => Number(b.cells[0].textContent) - Number(a.cells[0].textContent));
  const head = document.createElement("tr");
  head.insertCell().textContent = "cosine";
  head.insertCell().textContent = `with "${lines[0]}"`;
  $("similarities").replaceChildren(head, ...rows);
}

function cosine(a, b) {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / Math.sqrt(na * nb);
}

async function showAttention() {
  const kind = $("kind").value;
  const map = await state.reader.map($("attention-text").value, { kind });
  state.map = map;
  const words = map.ids.map((id, i) => (map.special.has(id) ? -1 : i)).filter((i) => i >= 0);
  state.query = words[0] ?? 0;
  const buttons = (tokens, ids, clickable) =>
    tokens.map((token, index) => {
      const button = document.createElement("button");
      button.type = "button";
      button.className = map.special.has(ids[index]) ? "token special" : "token";
      button.textContent = token;
      button.dataset.index = String(index);
      if (clickable) {
        button.addEventListener("click", () => {
          state.query = index;
          render();
        });
      }
      return button;
    });
  // Self-attention: one row, each token both the one clicked and one highlighted. Cross-attention: the
  // output tokens (clicked) above the source tokens (highlighted).
  const cross = map.kind === "cross";
  $("query-tokens").hidden = !cross;
  $("query-tokens").replaceChildren(...(cross ? buttons(map.tokens, map.ids, true) : []));
  $("tokens").replaceChildren(...buttons(map.keyTokens, map.keyIds, !cross));
  render();
}

const level = (id) => ($(id).value === "" ? null : Number($(id).value));

/** The sentence highlighted by the weights the chosen token gives, and the layer x head grid. */
function render() {
  const map = state.map;
  if (map === null) return;
  const layer = level("layer");
  const head = level("head");
  const row = map.row(state.query, { layer, head });
  const top = Math.max(...row);
  for (const button of $("tokens").children) {
    const k = Number(button.dataset.index);
    const weight = row[k];
    button.style.background = `rgba(255, 140, 0, ${(weight / top).toFixed(3)})`;
    button.title = `receives ${weight.toFixed(3)}`;
    button.dataset.weight = weight.toFixed(6);
  }
  const clicked = map.kind === "cross" ? $("query-tokens") : $("tokens");
  for (const button of clicked.children) {
    button.classList.toggle("selected", Number(button.dataset.index) === state.query);
  }
  const where = {
    "true,true": `averaged over ${map.layers} layers and ${map.heads} heads`,
    "true,false": `head ${head}, averaged over ${map.layers} layers`,
    "false,true": `layer ${layer}, averaged over ${map.heads} heads`,
    "false,false": `layer ${layer}, head ${head}`,
  }[[layer === null, head === null].join()];
  const ranked = [...row.keys()].sort((a, b) => row[b] - row[a]).slice(0, 3);
  const query = `"${map.tokens[state.query].trim()}" (token ${state.query})`;
  $("attention-caption").textContent =
    (map.kind === "cross" ? `writing ${query}, the decoder looks most at ` : `${query} attends most to `) +
    ranked.map((k) => `"${map.keyTokens[k].trim()}" ${row[k].toFixed(2)}`).join(", ") +
    ` (${where})`;
  $("attention-caption").dataset.query = String(state.query);
  drawGrid(map, { layer, head });
}

const VIRIDIS = [
  [68, 1, 84],
  [59, 82, 139],
  [33, 145, 140],
  [94, 201, 98],
  [253, 231, 37],
];

function viridis(t) {
  const x = Math.min(Math.max(t, 0), 1) * (VIRIDIS.length - 1);
  const i = Math.min(Math.floor(x), VIRIDIS.length - 2);
  const f = x - i;
  const [a, b] = [VIRIDIS[i], VIRIDIS[i + 1]];
  return `rgb(${a.map((v, j) => Math.round(v + f * (b[j] - v))).join(",")})`;
}

const GAP = 22;
const GRID_WIDTH = 760;

/** Every (layer, head) heatmap, queries down and keys across, the chosen query's row outlined. */
function drawGrid(map, { layer, head }) {
  const canvas = $("heatmap");
  // Cells of at most 110 px per panel side, smaller when the grid would pass GRID_WIDTH (MiniLM: 12 heads).
  const fit = Math.floor((GRID_WIDTH / map.heads - GAP) / map.keys);
  const cell = Math.max(2, Math.min(Math.floor(110 / Math.max(map.keys, map.queries)), fit));
  const [width, height] = [cell * map.keys, cell * map.queries]; // one panel
  canvas.width = map.heads * (width + GAP) + GAP;
  canvas.height = map.layers * (height + GAP) + GAP;
  const context = canvas.getContext("2d");
  context.fillStyle = "#fff";
  context.fillRect(0, 0, canvas.width, canvas.height);
  context.font = width < 80 ? "9px sans-serif" : "11px sans-serif";
  let top = 0;
  for (const data of map.weights) for (const value of data) top = Math.max(top, value);
  for (let l = 0; l < map.layers; l++) {
    for (let h = 0; h < map.heads; h++) {
      const x0 = GAP + h * (width + GAP);
      const y0 = GAP + l * (height + GAP);
      context.fillStyle = "#333";
      context.fillText(width < 80 ? `L${l} H${h}` : `layer ${l} head ${h}`, x0, y0 - 6);
      for (let q = 0; q < map.queries; q++) {
        for (let k = 0; k < map.keys; k++) {
          context.fillStyle = viridis(map.at(l, h, q, k) / top);
          context.fillRect(x0 + k * cell, y0 + q * cell, cell, cell);
        }
      }
      context.strokeStyle = "#e91e63";
      context.lineWidth = 2;
      context.strokeRect(x0 - 1, y0 + state.query * cell - 1, width + 2, cell + 2);
      const chosen = (layer === null || layer === l) && (head === null || head === h);
      context.strokeStyle = chosen ? "#111" : "#ccc";
      context.lineWidth = chosen ? 3 : 1;
      context.strokeRect(x0 - 3, y0 - 3, width + 6, height + 6);
    }
  }
  Object.assign(canvas.dataset, { panelWidth: width, panelHeight: height, gap: GAP });
}

function pickPanel(event) {
  const map = state.map;
  if (map === null) return;
  const { panelWidth, panelHeight } = $("heatmap").dataset;
  const rect = $("heatmap").getBoundingClientRect();
  const scale = $("heatmap").width / rect.width; // canvas pixels per CSS pixel
  const h = Math.floor(((event.clientX - rect.left) * scale - GAP / 2) / (Number(panelWidth) + GAP));
  const l = Math.floor(((event.clientY - rect.top) * scale - GAP / 2) / (Number(panelHeight) + GAP));
  if (l < 0 || l >= map.layers || h < 0 || h >= map.heads) return;
  $("layer").value = String(l);
  $("head").value = String(h);
  render();
}

$("open-form").addEventListener(
  "submit",
  action(() => openExport({ url: $("folder-url").value })),
);
for (const button of document.querySelectorAll("[data-folder]")) {
  button.addEventListener(
    "click",
    action(() => {
      $("folder-url").value = button.dataset.folder;
      return openExport({ url: button.dataset.folder });
    }),
  );
}
$("folder-pick").addEventListener(
  "change",
  action(() => openExport({ url: null, files: pickedFiles($("folder-pick").files) })),
);
$("run-goldens").addEventListener("click", action(runGoldens));
$("generate").addEventListener("click", action(generate));
$("stop").addEventListener("click", () => {
  state.stopping = true;
});
$("compare").addEventListener("click", action(compare));
$("show-attention").addEventListener("click", action(showAttention));
$("layer").addEventListener("change", render);
$("head").addEventListener("change", render);
$("kind").addEventListener("change", action(showAttention));
$("heatmap").addEventListener("click", pickPanel);
if (params.has("folder")) $("folder-url").value = params.get("folder");
document.body.dataset.ready = "true";
