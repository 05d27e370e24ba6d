package env

import "github.com/medgym/medgym/bus"

// Binary is the env-server binary: services/env's main runs it.
var Binary = bus.Binary{Name: "env-server", MetricsAddr: "127.0.0.1:9105", Config: func() bus.Component { return &Config{} }}
