#!/usr/bin/env node
// Run every golden test vector of one or more export folders and print each one's difference.
//
//   node bin/verify.js exported/gpt [exported/t5 ...] [--engine native|wasm|all] [--threads N] [--json]
//
// Exit status: 0 when every golden passes, 1 when one fails, 2 when a folder cannot be checked at all
// (missing, altered or without goldens) or the arguments are wrong.

import { parseArgs } from "node:util";

import { ENGINES, OnnxformerError, verifyExport } from "../src/index.js";

const USAGE = "usage: node bin/verify.js DIR [DIR ...] [--engine native|wasm|all] [--threads N] [--json]";

function parse() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      engine: { type: "string", default: "native" },
      threads: { type: "string" },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const engines = values.engine === "all" ? Object.keys(ENGINES) : [values.engine];
  const threads = values.threads === undefined ? undefined : Number(values.threads);
  if (positionals.length === 0 || engines.some((name) => !Object.hasOwn(ENGINES, name))) {
    throw new Error(USAGE);
  }
  return { dirs: positionals, engines, threads, json: values.json };
}

function describe(result) {
  switch (result.check) {
    case "graph":
      return `${result.file} [${result.label}] ${result.output ?? ""}`;
    case "tokenizer":
      return `tokenizer ${JSON.stringify(result.text)}`;
    case "greedy":
      return `greedy ${JSON.stringify(result.prompt)} -> ${result.got.length} tokens (${result.finishReason})`;
    default:
      return `embedding ${JSON.stringify(result.text)}`;
  }
}

function line(result) {
  const status = result.ok ? "ok  " : "FAIL";
  let diff = "";
  if (result.maxAbsDiff !== undefined) {
    const got = result.maxAbsDiff === null ? "-" : result.maxAbsDiff.toExponential(2);
    diff = `  max diff ${got} <= ${result.allowed.toExponential(2)}`;
  }
  const detail = result.ok || result.detail === undefined ? "" : `  (${result.detail})`;
  return `  ${status} ${describe(result)}${diff}${detail}`;
}

async function main() {
  let options;
  try {
    options = parse();
  } catch (error) {
    console.error(error.message);
    return 2;
  }
  const reports = [];
  for (const dir of options.dirs) {
    for (const engine of options.engines) {
      try {
        const report = await verifyExport(dir, { engine, threads: options.threads });
        reports.push(report);
        if (!options.json) {
          const failed = report.results.filter((result) => !result.ok).length;
          console.log(`${dir} on ${engine}: ${report.results.length - failed} passed, ${failed} failed`);
          for (const result of report.results) console.log(line(result));
        }
      } catch (error) {
        if (!(error instanceof OnnxformerError)) throw error;
        console.error(`${dir} on ${engine}: ${error.message}`);
        return 2;
      }
    }
  }
  if (options.json) console.log(JSON.stringify(reports, null, 2));
  return reports.every((report) => report.ok) ? 0 : 1;
}

process.exitCode = await main();
