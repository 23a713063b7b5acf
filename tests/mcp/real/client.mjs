// The TypeScript SDK client (@modelcontextprotocol/sdk) driven by a JSON plan.
//
//   node client.mjs PLAN.json   (MCP_PEERS: the folder scripts/provision-mcp printed)
//
// PLAN: {"target": {"command": [...], "env": {...}} | {"url": "...", "headers": {...}},
//        "steps": [{"op": "list"} | {"op": "call", "name": "...", "arguments": {...}}]}
// Prints one JSON document: {"protocolVersion", "serverVersion", "results": [...]}, where a
// result is the tools/list result or the tools/call result exactly as the client returns it
// (or {"error": {code, message}} when the client raised).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const peers = process.env.MCP_PEERS;
if (!peers) throw new Error("MCP_PEERS is not set");
const sdk = (path) =>
  import(pathToFileURL(join(peers, "node_modules/@modelcontextprotocol/sdk/dist/esm", path)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const target = plan.target;
const transport = target.url
  ? new StreamableHTTPClientTransport(new URL(target.url), {
      requestInit: { headers: target.headers ?? {} },
    })
  : new StdioClientTransport({
      command: target.command[0],
      args: target.command.slice(1),
      env: { ...process.env, ...(target.env ?? {}) },
      stderr: "inherit",
    });
// The version the handshake settled on, as the client hands it to its transport.
let negotiated = null;
const setVersion = transport.setProtocolVersion?.bind(transport);
transport.setProtocolVersion = (version) => {
  negotiated = version;
  setVersion?.(version);
};
const client = new Client({ name: "gateway-tests-ts", version: "1.0.0" });
await client.connect(transport);

const results = [];
for (const step of plan.steps) {
  try {
    if (step.op === "list") {
      results.push(await client.listTools());
    } else if (step.op === "call") {
      results.push(await client.callTool({ name: step.name, arguments: step.arguments }));
    } else {
      throw new Error(`unknown op ${step.op}`);
    }
  } catch (error) {
    results.push({ error: { code: error.code ?? null, message: String(error.message) } });
  }
}
const out = {
  protocolVersion: negotiated,
  serverVersion: client.getServerVersion() ?? null,
  results,
};
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
