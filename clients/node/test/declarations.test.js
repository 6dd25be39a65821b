// index.d.ts declares exactly what src/index.js exports: a name added to one and not the other
// fails here (types/usage.ts, compiled by tsc in tests/e2e/test_node_client.py, checks the types).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import * as client from "../src/index.js";

test("index.d.ts declares every value src/index.js exports, and no other", () => {
  const declarations = readFileSync(new URL("../index.d.ts", import.meta.url), "utf8");
  const declared = [...declarations.matchAll(/^export (?:declare )?(?:class|function|const) (\w+)/gm)]
    .map((match) => match[1])
    .sort();
  assert.deepEqual(declared, Object.keys(client).sort());
});
