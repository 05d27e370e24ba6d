package env

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestSocketsCountAgainstMaxConns: an OpenEnv WebSocket is a connection of
// --max-conns until it closes. With the cap taken by two sockets a third
// client waits in the accept queue (its short timeout runs out); once one
// socket closes, a client is served.
func TestSocketsCountAgainstMaxConns(t *testing.T) {
	env := startBench(t, 0, func(c *Config) { c.MaxConns = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(env.url, "http") + "/openenv/ws"
	var socks []*websocket.Conn
	for range 2 {
		ws, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		socks = append(socks, ws)
	}
	short := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := short.Get(env.url + "/openenv/health"); err == nil {
		resp.Body.Close()
		t.Fatalf("served (%d) beyond --max-conns 2 while two sockets are open", resp.StatusCode)
	}
	if err := socks[0].Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	long := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := long.Get(env.url + "/openenv/health")
	if err != nil {
		t.Fatalf("not served after a socket closed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("health: %d", resp.StatusCode)
	}
}
