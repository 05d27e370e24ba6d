// Package httpapi is the environment server's HTTP/JSON surface, the
// contract in openapi.json (embedded and served at /openapi.json): tasks,
// sessions, steps. It decodes and checks requests, maps the session
// domain's errors to status codes with a reason ({"error": {"code",
// "message"}}), enforces the bearer token and the body limit, and never
// answers bad input with a 5xx.
//
// Two more doors play the same sessions through the same calls, token,
// limits and error mapping: OpenEnv's protocol under /openenv (openenv.go:
// a WebSocket of reset/step/state/close messages and the HTTP endpoints,
// described by openenv.json) and MCP at /mcp (mcp.go: Streamable HTTP,
// the task's actions as tools, a tool call a step).
package httpapi
