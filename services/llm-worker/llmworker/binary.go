package llmworker

import "github.com/medgym/medgym/bus"

// Binary is the llm-worker binary: services/llm-worker's main runs it.
var Binary = bus.Binary{Name: "llm-worker", MetricsAddr: "127.0.0.1:9102", Config: func() bus.Component { return &Config{} }}
