// Compiled with `tsc --noEmit -p types` (tests/e2e/test_node_client.py): the declarations in
// index.d.ts are well-formed and describe the API as an agent written in TypeScript uses it.

import {
  type Completion,
  type FederatedStatus,
  type FederatedTools,
  type Member,
  type Outcome,
  type CompletionRef,
  type LogLevel,
  type SupervisorEvent,
  type ToolInfo,
  type ToolResult,
  LIVENESS_AFTER,
  LIVENESS_WAIT,
  FederatedClient,
  LOG_LEVELS,
  SupervisorClient,
  SupervisorError,
  ToolError,
  UnknownToolError,
  UnreachableError,
  defaultEndpoint,
} from "../index.js";

export async function agent(question: string): Promise<string> {
  const sup = new SupervisorClient({ endpoint: defaultEndpoint(), identity: "agent-ts", requestTimeout: 5 });
  try {
    const tools: ToolInfo[] = await sup.listTools();
    const { starting }: { starting: string[] } = await sup.listToolsVersioned({ wait: 30 });
    const names: string[] = tools.map((tool) => `${tool.server}/${tool.originalName}`);
    const controller = new AbortController();
    const result: ToolResult = await sup.callTool(
      "mcp_test_echo",
      { text: question },
      {
        timeout: 5,
        signal: controller.signal,
        onProgress: ({ progress, total, message }) => {
          const share: number = total === null ? progress : progress / total;
          void share;
          void message;
        },
      },
    );
    const events = sup.watchEvents();
    await events.joined(5);
    for await (const event of events) {
      const seen: SupervisorEvent = event;
      if (seen.type === "StateChanged") break;
    }
    return `${names.length} tools; ${result.text}`;
  } catch (error) {
    if (error instanceof ToolError || error instanceof UnknownToolError) return error.code;
    if (error instanceof SupervisorError) return `${error.code}: ${error.message} (${error.id ?? "-"})`;
    throw error;
  } finally {
    sup.close();
  }
}

/** Completions, log messages and resource updates, as a TypeScript agent uses them. */
export async function listener(server: string, uri: string): Promise<string[]> {
  const sup = new SupervisorClient();
  const heard: string[] = [];
  try {
    const prompt: CompletionRef = { type: "ref/prompt", name: "mcp_ev_completable-prompt" };
    const done: Completion = await sup.complete(prompt, { name: "department", value: "E" }, { timeout: 5 });
    const more: boolean | null = done.hasMore;
    const total: number | null = done.total;
    heard.push(...done.values, String(more), String(total));
    const template: CompletionRef = { type: "ref/resource", uri: "demo://resource/dynamic/text/{resourceId}" };
    const named = await sup.complete(
      template,
      { name: "resourceId", value: "7" },
      { server, context: { other: "value" }, signal: new AbortController().signal },
    );
    heard.push(...named.values);
    const level: LogLevel = LOG_LEVELS[0];
    await sup.setLogLevel(level, { server });
    await sup.setLogLevel("");
    await sup.subscribe(server, uri);
    const events = sup.watchEvents({ messages: true, topics: ["version"] as const });
    await events.joined();
    for await (const event of events) {
      if (event.type === "ServerMessage") {
        const data: unknown = event.data;
        const severity: LogLevel = event.level;
        heard.push(`${event.server} ${severity} ${event.logger}: ${JSON.stringify(data)}`);
      } else if (event.type === "ResourceUpdated") {
        heard.push(`${event.server} ${event.uri}`);
        break;
      }
    }
    await sup.unsubscribe(server, uri);
  } catch (error) {
    if (error instanceof UnreachableError) heard.push(`gone after ${LIVENESS_AFTER + LIVENESS_WAIT} s: ${error.message}`);
    else throw error;
  } finally {
    sup.close();
  }
  return heard;
}

/** Several supervisors as one, as a TypeScript agent federates them. */
export async function federated(first: string, second: string): Promise<string[]> {
  const fed = new FederatedClient([first, { endpoint: second, name: "gpu-1" }], { requestTimeout: 5 });
  const said: string[] = [];
  try {
    const { tools, owners, clashes, failures }: FederatedTools = await fed.listTools({ wait: 5 });
    said.push(...tools.map((tool) => `${tool.name} on ${owners[tool.server]?.name ?? "?"}`));
    for (const clash of clashes) said.push(`${clash.server}: ${clash.owner.name} kept, ${clash.leftOut.name} left out`);
    for (const failure of failures) said.push(`${failure.member.endpoint}: ${failure.error.code}`);
    const result: ToolResult = await fed.callTool("mcp_test_echo", { text: "hi" }, { timeout: 5 });
    said.push(result.text);
    const status: FederatedStatus = await fed.status();
    said.push(...status.rows.map(({ member, status }) => `${member.name}/${status.server}: ${status.state}`));
    const owner: Member = await fed.restart("test");
    const single: SupervisorClient = fed.client(owner);
    const pings: Outcome<void>[] = await fed.each((client) => client.ping());
    said.push(single.endpoint, String(pings.filter((o) => o.failure === undefined).length));
  } catch (error) {
    if (error instanceof UnknownToolError || error instanceof UnreachableError) said.push(error.message);
    else throw error;
  } finally {
    fed.close();
  }
  return said;
}
