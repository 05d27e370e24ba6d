package main

import (
	"testing"

	"github.com/medgym/medgym/bus/bustest"
)

// TestCredentialsNeverLogged (issue 13 item 8): --nats with user:password
// was logged in clear at start-up.
func TestCredentialsNeverLogged(t *testing.T) {
	bustest.CheckCredentialsNeverLogged(t, run)
}

// TestMetricsOnLoopbackByDefault (issue 13 item 10): /metrics and /healthz
// bound [::] by default.
func TestMetricsOnLoopbackByDefault(t *testing.T) {
	bustest.CheckMetricsOnLoopback(t, run, "127.0.0.1:9101")
}
