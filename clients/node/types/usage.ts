// Compiled with `tsc --noEmit -p types` (tests/e2e/test_node_client.py): the declarations in
// index.d.ts are well-formed and describe the API as an agent written in TypeScript uses it.

import {
  type SupervisorEvent,
  type ToolInfo,
  type ToolResult,
  SupervisorClient,
  SupervisorError,
  ToolError,
  UnknownToolError,
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
