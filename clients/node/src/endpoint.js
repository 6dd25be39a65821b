// Where the supervisor listens (docs/protocol.md, "Endpoints and security"): the default front
// endpoint, the ipc socket-file check, the events endpoint's wildcard host, and CURVE key files.
// Used by client.js and events.js; below it only Node's fs, os and path.

import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";

const RUN_USER = "/run/user"; // each user's runtime directory, made by the login manager

/**
 * @param {string} path
 * @param {number} uid
 */
function ownDirectory(path, uid) {
  try {
    const info = statSync(path);
    return info.isDirectory() && info.uid === uid;
  } catch {
    return false;
  }
}

/** @param {string | undefined} path */
function isDirectory(path) {
  try {
    return path !== undefined && path !== "" && statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/**
 * The temporary directory as Python's tempfile.gettempdir() picks it: $TMPDIR, $TEMP, $TMP (the
 * first set to a directory), else /tmp.
 * @param {NodeJS.ProcessEnv} env
 */
function tempDir(env) {
  for (const name of ["TMPDIR", "TEMP", "TMP"]) {
    if (isDirectory(env[name])) return /** @type {string} */ (env[name]);
  }
  return "/tmp";
}

/**
 * The front endpoint: the one given, else $MCP_SUPERVISOR_ENDPOINT, else the default ipc path.
 * @param {string | undefined} [given]
 * @param {NodeJS.ProcessEnv} [env]
 * @returns {string}
 */
export function defaultEndpoint(given, env = process.env) {
  if (given) return given;
  if (env.MCP_SUPERVISOR_ENDPOINT) return env.MCP_SUPERVISOR_ENDPOINT;
  const runtime = env.XDG_RUNTIME_DIR;
  if (isDirectory(runtime)) return `ipc://${join(/** @type {string} */ (runtime), "mcp-supervisor", "supervisor.sock")}`;
  const uid = typeof process.getuid === "function" ? process.getuid() : 0;
  // Without XDG_RUNTIME_DIR (a process an MCP host started), the login manager's directory stands
  // for it when it exists and is ours: the supervisor of the user's session is found there.
  const login = join(RUN_USER, String(uid));
  if (ownDirectory(login, uid)) return `ipc://${join(login, "mcp-supervisor", "supervisor.sock")}`;
  return `ipc://${join(tempDir(env), `mcp-supervisor-${uid}`, "supervisor.sock")}`;
}

/**
 * Why nothing listens at `endpoint`, or null: an ipc endpoint whose socket file does not exist.
 * @param {string} endpoint
 * @returns {string | null}
 */
export function missingSocket(endpoint) {
  if (!endpoint.startsWith("ipc://")) return null;
  const path = endpoint.slice("ipc://".length);
  return existsSync(path) ? null : `no supervisor at ${endpoint}: the socket file does not exist`;
}

/**
 * The events endpoint to connect to: `events` from StatusReply, with a wildcard host replaced by
 * the host the front endpoint names.
 * @param {string} events
 * @param {string} front
 */
export function eventsEndpoint(events, front) {
  const match = /^tcp:\/\/(0\.0\.0\.0|\*|\[::\]):(\d+)$/.exec(events);
  const host = /^tcp:\/\/(.+):\d+$/.exec(front);
  if (match && host) return `tcp://${host[1]}:${match[2]}`;
  return events;
}

/**
 * @param {string} path
 * @param {"public-key" | "secret-key"} field
 */
function readKey(path, field) {
  const text = readFileSync(path, "utf8");
  const match = new RegExp(`^\\s*${field}\\s*=\\s*"(.{40})"\\s*$`, "m").exec(text);
  if (!match) throw new Error(`${path}: no ${field} (a 40-character Z85 string) in this key file`);
  return match[1];
}

/**
 * The CURVE keys of a key directory as `mcp-supervisor keygen` writes it: server.key,
 * client.key and client.key_secret.
 * @param {string} dir
 * @returns {{ serverKey: string, publicKey: string, secretKey: string }}
 */
export function loadKeys(dir) {
  return {
    serverKey: readKey(join(dir, "server.key"), "public-key"),
    publicKey: readKey(join(dir, "client.key"), "public-key"),
    secretKey: readKey(join(dir, "client.key_secret"), "secret-key"),
  };
}
