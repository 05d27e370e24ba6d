package verifier

import "github.com/medgym/medgym/bus"

// Binary is the verifier binary: services/verifier's main runs it.
var Binary = bus.Binary{Name: "verifier", MetricsAddr: "127.0.0.1:9104", Config: func() bus.Component { return &Config{} }}
