// An MCP client of the TypeScript SDK that authorizes itself with OAuth, for the facade's end-to-end tests.
//
//   node oauth-client.mjs URL TOOL ARGS_JSON [CLIENT_NAME]
//
// Connects to the streamable HTTP server at URL with StreamableHTTPClientTransport and an in-memory
// OAuthClientProvider: the 401 leads the SDK through discovery (protected resource metadata, then the
// authorization server's), dynamic registration and the authorization URL, which this script fetches
// (the test authorization server approves at once) to read the code off its redirect; then it lists the
// tools and calls TOOL with ARGS_JSON. Prints one JSON line on stdout:
//   {"authorized": true, "tools": [...names], "result": <the call's result>, "scope": "...", "discovered": "..."}
// Fails (exit 1, the reason on stderr) on any error.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

const [url, tool, argsJson, clientName = "ts-sdk-client"] = process.argv.slice(2);
const REDIRECT = "http://127.0.0.1:1/callback"; // never listened on: the redirect is read, not followed

class MemoryProvider {
  constructor() {
    this.code = undefined;
    this.authorizations = 0;
  }
  get redirectUrl() {
    return REDIRECT;
  }
  get clientMetadata() {
    return {
      client_name: clientName,
      redirect_uris: [REDIRECT],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_post",
    };
  }
  clientInformation() {
    return this.client;
  }
  saveClientInformation(client) {
    this.client = client;
  }
  tokens() {
    return this.savedTokens;
  }
  saveTokens(tokens) {
    this.savedTokens = tokens;
  }
  saveCodeVerifier(verifier) {
    this.verifier = verifier;
  }
  codeVerifier() {
    return this.verifier;
  }
  async redirectToAuthorization(authorizationUrl) {
    // What a person's browser would do: the authorization server answers with a redirect that carries
    // the code.
    const answer = await fetch(authorizationUrl, { redirect: "manual" });
    const location = answer.headers.get("location");
    if (answer.status !== 302 || !location) {
      throw new Error(`the authorization URL answered ${answer.status}, not a redirect`);
    }
    this.code = new URL(location).searchParams.get("code");
    if (!this.code) throw new Error(`the redirect has no code: ${location}`);
    this.authorizations += 1;
    this.discovered = authorizationUrl.origin;
  }
}

async function main() {
  const provider = new MemoryProvider();
  const client = new Client({ name: "ts-oauth-test", version: "1.0.0" });
  let transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  try {
    await client.connect(transport);
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error;
    await transport.finishAuth(provider.code);
    transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
    await client.connect(transport);
  }
  const tools = (await client.listTools()).tools.map((t) => t.name);
  const result = await client.callTool({ name: tool, arguments: JSON.parse(argsJson) });
  await client.close();
  const out = {
    authorized: provider.authorizations === 1,
    tools,
    result,
    scope: provider.savedTokens?.scope ?? null,
    discovered: provider.discovered ?? null,
  };
  process.stdout.write(JSON.stringify(out) + "\n");
}

const deadline = setTimeout(() => {
  process.stderr.write("the client did not finish within 60 s\n");
  process.exit(2);
}, 60_000);
main().then(
  () => {
    clearTimeout(deadline);
    process.exit(0);
  },
  (error) => {
    process.stderr.write(`${error?.stack ?? error}\n`);
    process.exit(1);
  },
);
