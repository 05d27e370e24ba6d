// Package httpapi is the environment server's HTTP/JSON surface, the
// contract in openapi.json (embedded and served at /openapi.json): tasks,
// sessions, steps. It decodes and checks requests, maps the session
// domain's errors to status codes with a reason ({"error": {"code",
// "message"}}), enforces the bearer token and the body limit, and never
// answers bad input with a 5xx.
package httpapi
