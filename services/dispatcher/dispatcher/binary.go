package dispatcher

import "github.com/medgym/medgym/bus"

// Binary is the dispatcher binary: services/dispatcher's main runs it.
var Binary = bus.Binary{Name: "dispatcher", MetricsAddr: "127.0.0.1:9101", Config: func() bus.Component { return &Config{} }}
