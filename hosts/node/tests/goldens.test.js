// Every golden of the committed reference exports, on both engines: graph outputs within the listed
// tolerance, tokenizer ids equal, greedy generations token for token, embeddings within tolerance.
// The largest difference seen per graph output is reported as a test diagnostic, and README.md's results
// table is held to what was measured.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ENGINES, verifyExport } from "../src/index.js";
import { exportDir } from "./helpers.js";
import { near, resultsTable } from "./readme.js";

const README_ROWS = resultsTable();

/** README.md's row for `family` against the report: counts equal, differences within a factor of 2. */
function checkReadmeRow(family, engine, results) {
  const row = README_ROWS[family];
  assert.ok(row, `README.md's results table has no ${family} row`);
  const graphs = results.filter((result) => result.check === "graph");
  assert.equal(graphs.length, row.outputs, `README: ${family}'s graph outputs checked`);
  const cases = new Set(graphs.map((result) => `${result.file} ${result.label}`));
  assert.equal(cases.size, row.cases, `README: ${family}'s cases`);
  const largest = Math.max(...graphs.map((result) => result.maxAbsDiff));
  const stated = `README: ${family} on ${engine}: max diff ${row[engine]}, measured ${largest}`;
  assert.ok(near(largest, row[engine]), stated);
  const share = Math.max(...graphs.map((result) => result.maxAbsDiff / result.allowed));
  assert.ok(share < 0.5, `README: every difference is under half its allowance, ${family} had ${share}`);
  const embeddings = results.filter((result) => result.check === "embedding");
  assert.equal(embeddings.length > 0, row.embeddings !== null, `README: ${family}'s embeddings column`);
  if (embeddings.length > 0) {
    const worst = Math.max(...embeddings.map((result) => result.maxAbsDiff));
    const stated = row.embeddings[engine];
    assert.ok(near(worst, stated), `README: ${family} ${engine} embeddings ${stated}, measured ${worst}`);
  }
}

/** Per graph output (and for embeddings), the largest difference over all cases and its allowance. */
function summarize(results) {
  const worst = new Map();
  for (const result of results) {
    if (result.maxAbsDiff === undefined) continue;
    const key = result.check === "graph" ? `${result.file} ${result.output}` : `embedding ${result.output}`;
    const seen = worst.get(key);
    if (seen === undefined || !(result.maxAbsDiff <= seen.maxAbsDiff)) worst.set(key, result);
  }
  return [...worst].map(
    ([key, result]) =>
      `${key}: max diff ${result.maxAbsDiff.toExponential(2)} (allowed ${result.allowed.toExponential(2)})`,
  );
}

function failures(results) {
  return results
    .filter((result) => !result.ok)
    .map((result) => JSON.stringify({ ...result, got: undefined }))
    .join("\n");
}

for (const engine of Object.keys(ENGINES)) {
  for (const [family, checks] of [
    ["gpt", ["graph", "tokenizer", "greedy"]],
    ["t5", ["graph", "tokenizer", "greedy"]],
    ["bert", ["graph", "tokenizer", "embedding"]],
  ]) {
    test(`${family} goldens on ${engine}`, async (t) => {
      const report = await verifyExport(exportDir(family), { engine, threads: 1 });
      for (const line of summarize(report.results)) t.diagnostic(line);
      const kinds = new Set(report.results.map((result) => result.check));
      assert.deepEqual([...kinds].sort(), [...checks].sort(), "every kind of golden ran");
      assert.ok(report.ok, `goldens failed on ${engine}:\n${failures(report.results)}`);
      checkReadmeRow(family, engine, report.results);
    });
  }
}
