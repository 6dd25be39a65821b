// Shared by the tests: the supervisor the pytest side started (tests/e2e/test_node_client.py),
// and bounded waits that fail saying what they waited for.

import { existsSync } from "node:fs";
import { join } from "node:path";

export const ENDPOINT = process.env.MCP_SUPERVISOR_ENDPOINT;
export const STATE_DIR = process.env.NODE_CLIENT_STATE_DIR;
if (!ENDPOINT || !STATE_DIR) {
  throw new Error("run these tests through tests/e2e/test_node_client.py: it starts the supervisor they need");
}

/**
 * `promise`, or a failure naming `what` after `seconds`.
 * @template T
 * @param {number} seconds
 * @param {string} what
 * @param {Promise<T>} promise
 * @returns {Promise<T>}
 */
export async function within(seconds, what, promise) {
  let timer;
  const expired = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${seconds} s waiting for ${what}`)), seconds * 1000);
  });
  try {
    return await Promise.race([promise, expired]);
  } finally {
    clearTimeout(timer);
  }
}

/** Poll (bounded) until the test server's marker file `tag.suffix` exists. */
export async function marker(tag, suffix, seconds = 10) {
  const path = join(STATE_DIR, `${tag}.${suffix}`);
  const deadline = Date.now() + seconds * 1000;
  while (!existsSync(path)) {
    if (Date.now() > deadline) throw new Error(`timed out after ${seconds} s waiting for ${path}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/**
 * The rejection of `promise`, bounded; fails if it resolves.
 * @param {Promise<unknown>} promise
 */
export async function rejection(promise, seconds = 15) {
  const outcome = await within(
    seconds,
    "a rejection",
    promise.then(
      (value) => ({ value }),
      (error) => ({ error }),
    ),
  );
  if (!("error" in outcome)) throw new Error(`expected a rejection, got ${JSON.stringify(outcome.value)}`);
  return outcome.error;
}
