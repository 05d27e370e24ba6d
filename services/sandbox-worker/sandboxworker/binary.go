package sandboxworker

import "github.com/medgym/medgym/bus"

// Binary is the sandbox-worker binary: services/sandbox-worker's main runs it.
var Binary = bus.Binary{Name: "sandbox-worker", MetricsAddr: "127.0.0.1:9103", Config: func() bus.Component { return &Config{} }}
