package main

import (
	"testing"

	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/services/dispatcher/dispatcher"
)

// TestCredentialsNeverLogged (issue 13 item 8): --nats with user:password
// was logged in clear at start-up.
func TestCredentialsNeverLogged(t *testing.T) {
	bustest.CheckCredentialsNeverLogged(t, dispatcher.Binary.Run)
}

// TestMetricsOnLoopbackByDefault (issue 13 item 10): /metrics and /healthz
// bound [::] by default.
func TestMetricsOnLoopbackByDefault(t *testing.T) {
	bustest.CheckMetricsOnLoopback(t, dispatcher.Binary.Run, dispatcher.Binary.MetricsAddr)
}
