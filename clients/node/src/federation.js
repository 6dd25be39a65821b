// FederatedClient: several supervisors seen as one registry (docs/protocol.md, "Federating several
// supervisors"), one SupervisorClient per member. A request about the whole registry goes to every
// member at once; a member that fails is reported by name while the others' answers stand. A server
// listed by several members belongs to the first of them in order; the later copies are left out and
// reported as clashes. A request about one tool or server goes to its owner, learnt from the merged
// listings. The same rules as the Python clients' (supervisor/shared/federation.py).

import { SupervisorClient } from "./client.js";
import { SupervisorError, UnknownToolError, UnreachableError } from "./errors.js";

/** Supervisors one client federates, at most. */
export const MAX_MEMBERS = 64;

/**
 * A member's default name: the host of a tcp:// endpoint, "local" for ipc://.
 * @param {string} endpoint
 */
function label(endpoint) {
  if (endpoint.startsWith("ipc://")) return "local";
  try {
    const host = new URL(endpoint).hostname.replace(/^\[|\]$/g, "");
    return host || endpoint;
  } catch {
    return endpoint;
  }
}

/**
 * The members as given (endpoint strings or {endpoint, name?, keys?}), checked, in order; two with
 * one name (two on one host) are named by their endpoints instead.
 * @param {unknown} given
 * @returns {{ endpoint: string, name: string, keys: string | null }[]}
 */
function membersOf(given) {
  if (!Array.isArray(given) || given.length === 0) throw new TypeError("a federation needs at least one supervisor");
  if (given.length > MAX_MEMBERS) throw new RangeError(`${given.length} supervisors; at most ${MAX_MEMBERS}`);
  const seen = new Set();
  const found = given.map((entry) => {
    const fields = typeof entry === "string" ? { endpoint: entry } : entry;
    if (fields === null || typeof fields !== "object" || typeof fields.endpoint !== "string") {
      throw new TypeError(`a member is an endpoint or {endpoint, name?, keys?}, got ${JSON.stringify(entry)}`);
    }
    const endpoint = fields.endpoint.trim();
    if (!endpoint.includes("://")) throw new TypeError(`${JSON.stringify(endpoint)} is no endpoint (tcp://HOST:PORT, ipc://PATH)`);
    if (seen.has(endpoint)) throw new TypeError(`${endpoint} is named twice`);
    seen.add(endpoint);
    const name = typeof fields.name === "string" && fields.name.trim() ? fields.name.trim() : label(endpoint);
    const keys = typeof fields.keys === "string" && fields.keys ? fields.keys : null;
    return { endpoint, name, keys };
  });
  const names = found.map((member) => member.name);
  return found.map((member) =>
    names.indexOf(member.name) === names.lastIndexOf(member.name) ? member : { ...member, name: member.endpoint },
  );
}

/** @param {{ name: string, endpoint: string }} member */
function who(member) {
  return `${member.name} (${member.endpoint})`;
}

/**
 * A client of several supervisors (`members`, in order: the first owns a clashing server). `keys`:
 * the CURVE key directory of the members that name none of their own; `requestTimeout`, `identity`
 * and `replyMargin` as SupervisorClient's, for every member. Close it when done.
 */
export class FederatedClient {
  /**
   * @param {(string | { endpoint: string, name?: string, keys?: string })[]} members
   * @param {{ keys?: string, requestTimeout?: number, identity?: string, replyMargin?: number }} [options]
   */
  constructor(members, options = {}) {
    this.members = Object.freeze(membersOf(members).map((member) => Object.freeze(member)));
    /** @type {SupervisorClient[]} */
    this._clients = this.members.map(
      (member) =>
        new SupervisorClient({
          endpoint: member.endpoint,
          keys: member.keys ?? options.keys,
          requestTimeout: options.requestTimeout,
          identity: options.identity,
          replyMargin: options.replyMargin,
        }),
    );
    /** @type {Map<string, any> | null} tool name -> member, from the last merged tool list */
    this._tools = null;
    /** @type {Map<string, any> | null} server -> member, from the last merged status */
    this._servers = null;
    /** @type {Set<string>} every server heard of, for errors */
    this._heard = new Set();
  }

  /** The client of one member (one of `members`, or its name). */
  client(member) {
    const index = this.members.findIndex((m) => m === member || m.name === member);
    if (index < 0) throw new RangeError(`no member ${typeof member === "string" ? member : JSON.stringify(member)}`);
    return this._clients[index];
  }

  /** Close every member's client; requests in flight reject with CLOSED. */
  close() {
    for (const client of this._clients) client.close();
  }

  /**
   * `ask` of every member's client at once, in the members' order: each member's `{member, value}`,
   * or `{member, failure: {member, error}}` for a SupervisorError (any other error is thrown).
   * @template R
   * @param {(client: SupervisorClient) => Promise<R>} ask
   */
  async each(ask) {
    const settled = await Promise.allSettled(this._clients.map((client) => ask(client)));
    return settled.map((outcome, index) => {
      const member = this.members[index];
      if (outcome.status === "fulfilled") return { member, value: outcome.value };
      if (outcome.reason instanceof SupervisorError) return { member, failure: { member, error: outcome.reason } };
      throw outcome.reason;
    });
  }

  /**
   * The outcomes' entries as one: each server's from the first member that lists it.
   * @param {{ member: any, value?: any[], failure?: any }[]} outcomes
   * @param {(entry: any) => string} serverOf
   */
  _merge(outcomes, serverOf) {
    const entries = [];
    /** @type {Map<string, number>} */
    const owners = new Map();
    const clashes = [];
    const seen = new Set();
    outcomes.forEach((outcome, index) => {
      for (const entry of outcome.value ?? []) {
        const server = serverOf(entry);
        if (!owners.has(server)) owners.set(server, index);
        const owner = /** @type {number} */ (owners.get(server));
        if (owner === index) {
          entries.push(entry);
        } else if (!seen.has(`${owner} ${index} ${server}`)) {
          seen.add(`${owner} ${index} ${server}`);
          clashes.push({ server, owner: this.members[owner], leftOut: this.members[index] });
        }
      }
    });
    const failures = outcomes.filter((outcome) => outcome.failure).map((outcome) => outcome.failure);
    const byServer = Object.fromEntries([...owners].map(([server, index]) => [server, this.members[index]]));
    return { entries, owners: byServer, clashes, failures };
  }

  /**
   * Every reachable member's tools, merged; `wait` as SupervisorClient.listTools's.
   * @param {{ wait?: number }} [options]
   */
  async listTools(options = {}) {
    const merged = this._merge(await this.each((client) => client.listTools(options)), (tool) => tool.server);
    this._tools = new Map(merged.entries.map((tool) => [tool.name, merged.owners[tool.server]]));
    for (const server of Object.keys(merged.owners)) this._heard.add(server);
    return { tools: merged.entries, owners: merged.owners, clashes: merged.clashes, failures: merged.failures };
  }

  /** Every reachable member's status rows (clashing servers' too), each with its member. */
  async status() {
    const outcomes = await this.each((client) => client.status());
    const merged = this._merge(
      outcomes.map((outcome) => ({ ...outcome, value: outcome.value?.servers })),
      (row) => row.server,
    );
    this._servers = new Map(Object.entries(merged.owners));
    for (const server of Object.keys(merged.owners)) this._heard.add(server);
    const rows = outcomes.flatMap((outcome) => (outcome.value?.servers ?? []).map((status) => ({ member: outcome.member, status })));
    return { rows, owners: merged.owners, clashes: merged.clashes, failures: merged.failures };
  }

  /** Why no member has the `kind` (tool, server) `name`. */
  _missing(kind, name, failures) {
    if (failures.length) {
      const said = failures.map((failure) => `${who(failure.member)}: ${failure.error.message}`).join("; ");
      return new UnreachableError("UNREACHABLE", `no reachable supervisor has a ${kind} named ${JSON.stringify(name)} (${said})`);
    }
    const servers = [...this._heard].sort().join(", ") || "none";
    return new UnknownToolError("UNKNOWN_TOOL", `no ${kind} named ${JSON.stringify(name)} on any of the supervisors (servers: ${servers})`);
  }

  /** The member whose server has the tool `name` (the tools are listed again once when it is not known). */
  async toolOwner(name) {
    let member = this._tools?.get(name);
    if (member === undefined) {
      const { failures } = await this.listTools();
      member = this._tools?.get(name);
      if (member === undefined) throw this._missing("tool", name, failures);
    }
    return member;
  }

  /** The member that owns `server` (the status is asked again once when it is not known). */
  async serverOwner(server) {
    let member = this._servers?.get(server);
    if (member === undefined) {
      const { failures } = await this.status();
      member = this._servers?.get(server);
      if (member === undefined) throw this._missing("server", server, failures);
    }
    return member;
  }

  /** `ask` of `member`'s client; its not answering says which member it is. */
  async _on(member, ask) {
    try {
      return await ask(this.client(member));
    } catch (error) {
      if (error instanceof UnreachableError) {
        throw new UnreachableError(error.code, `${who(member)}: ${error.message}`, { id: error.id ?? undefined, cause: error });
      }
      throw error;
    }
  }

  /**
   * Call a tool on the member that has it (as SupervisorClient.callTool). A member that no longer has
   * it (UNKNOWN_TOOL) makes the tools listed again, and the call goes once to the member that has it
   * now, if another.
   * @param {string} name
   * @param {Record<string, unknown>} [args]
   * @param {object} [options]
   */
  async callTool(name, args = {}, options = {}) {
    const member = await this.toolOwner(name);
    const call = (/** @type {SupervisorClient} */ client) => client.callTool(name, args, options);
    try {
      return await this._on(member, call);
    } catch (error) {
      if (!(error instanceof UnknownToolError)) throw error;
      this._tools = null;
      const now = await this.toolOwner(name);
      if (now === member) throw error;
      return this._on(now, call);
    }
  }

  /** Restart `server` on its owner; resolves with the owner. @param {string} server */
  async restart(server) {
    const member = await this.serverOwner(server);
    await this._on(member, (client) => client.restart(server));
    return member;
  }

  /** Stop `server` on its owner; resolves with the owner. @param {string} server */
  async stop(server) {
    const member = await this.serverOwner(server);
    await this._on(member, (client) => client.stop(server));
    return member;
  }

  /** Start `server` on its owner; resolves with the owner. @param {string} server */
  async start(server) {
    const member = await this.serverOwner(server);
    await this._on(member, (client) => client.start(server));
    return member;
  }
}
