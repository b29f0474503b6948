// bin/verify.js as a user runs it: exit 0 with every difference printed, 1 when a golden disagrees
// (a golden output altered and re-listed with its new sha256, so only the comparison can catch it),
// 2 when the folder itself is refused.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { sha256Hex } from "../src/folder.js";
import { decodeTensorProto } from "../src/tensorproto.js";
import { exportDir, scratchCopy } from "./helpers.js";
import { near, sampleOutput } from "./readme.js";

const VERIFY = fileURLToPath(new URL("../bin/verify.js", import.meta.url));
const HOST = fileURLToPath(new URL("..", import.meta.url));

async function verify(...args) {
  try {
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      [VERIFY, ...args, "--threads", "1"],
      { cwd: HOST },
    );
    return { code: 0, stdout, stderr };
  } catch (error) {
    return { code: error.code, stdout: error.stdout, stderr: error.stderr };
  }
}

test("verify prints each golden's difference and exits 0", async () => {
  const { code, stdout } = await verify(exportDir("bert"));
  assert.equal(code, 0, stdout);
  assert.match(stdout, /on native: \d+ passed, 0 failed/);
  assert.match(stdout, /ok {3}encoder\.onnx \[B=1 T=4\] sentence_embedding {2}max diff \d\.\d\de-\d+ <= /);
  assert.match(stdout, /ok {3}embedding "" {2}max diff/);
});

test("README.md's sample output is what verify prints", async () => {
  const sample = sampleOutput();
  const { code, stdout } = await verify("../../exported/gpt"); // as the README runs it, from hosts/node
  assert.equal(code, 0, stdout);
  const lines = stdout.trimEnd().split("\n");
  assert.equal(sample[0], lines[0]);
  for (const line of sample.slice(1).filter((text) => text.trim() !== "...")) {
    const stated = line.match(/^(.* max diff )(\S+)( <= \S+)$/);
    if (stated === null) {
      assert.ok(lines.includes(line), `verify printed no line ${JSON.stringify(line)}`);
      continue;
    }
    const printed = lines.find((text) => text.startsWith(stated[1]) && text.endsWith(stated[3]));
    assert.ok(printed, `verify printed no line like ${JSON.stringify(line)}`);
    const measured = Number(printed.slice(stated[1].length).split(" ")[0]);
    assert.ok(near(measured, Number(stated[2])), `${line}: measured ${measured}`);
  }
});

test("verify --json gives one report per engine", async () => {
  const { code, stdout } = await verify(exportDir("bert"), "--json", "--engine", "all");
  assert.equal(code, 0);
  const reports = JSON.parse(stdout);
  assert.deepEqual(
    reports.map((report) => [report.engine, report.ok]),
    [
      ["native", true],
      ["wasm", true],
    ],
  );
});

test("a golden the engine disagrees with fails with exit 1", async (t) => {
  const dir = await scratchCopy(t, "bert");
  const manifestPath = path.join(dir, "manifest.json");
  const manifest = JSON.parse(await readFile(manifestPath, "utf8"));
  const golden = manifest.goldens.graphs[0].cases[0];
  const file = `${golden.dir}/output_${golden.outputs.indexOf("sentence_embedding")}.pb`;
  const bytes = await readFile(path.join(dir, file));
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  view.setFloat32(bytes.length - 4, view.getFloat32(bytes.length - 4, true) + 1e-3, true); // last value
  await writeFile(path.join(dir, file), bytes);
  const entry = manifest.files.find((item) => item.path === file);
  entry.sha256 = sha256Hex(bytes);
  await writeFile(manifestPath, JSON.stringify(manifest));

  const { code, stdout } = await verify(dir);
  assert.equal(code, 1, stdout);
  const allowed = golden.allowed[golden.outputs.indexOf("sentence_embedding")];
  assert.match(
    stdout,
    new RegExp(
      `FAIL encoder\\.onnx \\[B=1 T=4\\] sentence_embedding {2}max diff 1\\.00e-3 <= ${allowed.toExponential(2)}`,
    ),
  );
  assert.match(stdout, /on native: \d+ passed, 1 failed/);
});

test("a case's own allowance is enforced where the graph's atol and rtol would pass", async (t) => {
  // The per-case allowances (docs/goldens.md) are tighter than the graph-wide atol + rtol * max|golden|
  // that older readers use: a difference between the two must fail.
  const dir = await scratchCopy(t, "bert");
  const manifestPath = path.join(dir, "manifest.json");
  const manifest = JSON.parse(await readFile(manifestPath, "utf8"));
  // The output whose own allowance is furthest below the graph-wide one.
  let chosen = null;
  for (const graph of manifest.goldens.graphs) {
    for (const golden of graph.cases) {
      for (const [index, name] of golden.outputs.entries()) {
        const file = `${golden.dir}/output_${index}.pb`;
        const bytes = await readFile(path.join(dir, file));
        const values = decodeTensorProto(bytes).data;
        const graphWide = graph.atol + graph.rtol * Math.max(...Array.from(values, Math.abs));
        const allowed = golden.allowed[index];
        if (chosen === null || graphWide / allowed > chosen.graphWide / chosen.allowed) {
          chosen = { graph, golden, name, file, bytes, graphWide, allowed };
        }
      }
    }
  }
  const { graph, golden, name, file, bytes, graphWide, allowed } = chosen;
  assert.ok(graphWide > 1.5 * allowed, `graph-wide ${graphWide}, the case's ${allowed}`);
  const delta = (allowed + graphWide) / 2;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  view.setFloat32(bytes.length - 4, view.getFloat32(bytes.length - 4, true) + delta, true); // last value
  await writeFile(path.join(dir, file), bytes);
  manifest.files.find((item) => item.path === file).sha256 = sha256Hex(bytes);
  await writeFile(manifestPath, JSON.stringify(manifest));

  const { code, stdout } = await verify(dir);
  assert.equal(code, 1, stdout);
  const line = stdout
    .split("\n")
    .find((text) => text.includes(`${graph.file} [${golden.label}] ${name} `));
  const measured = Number(line.match(/max diff (\S+)/)[1]);
  assert.match(line, /^ {2}FAIL /);
  assert.ok(allowed < measured && measured < graphWide, `${measured} between ${allowed} and ${graphWide}`);
});

test("an altered folder is refused with exit 2, naming the file", async (t) => {
  const dir = await scratchCopy(t, "bert");
  await writeFile(path.join(dir, "encoder.onnx"), "not a model");
  const { code, stderr } = await verify(dir);
  assert.equal(code, 2);
  assert.match(stderr, /encoder\.onnx has 11 bytes but manifest\.json says \d+/);
});

test("a wrong engine name is a usage error", async () => {
  const { code, stderr } = await verify(exportDir("bert"), "--engine", "cuda");
  assert.equal(code, 2);
  assert.match(stderr, /usage: node bin\/verify\.js/);
});
