// Package reqinfo answers the request_info action (column names, column
// values, term lookup) from an in-memory index over a resource's CSV tables.
// The index is built once per directory and reused across calls, so a call
// never re-reads the tables. Texts follow upstream MedAgentGym.
package reqinfo
