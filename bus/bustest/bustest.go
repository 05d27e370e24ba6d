// Package bustest starts a real, in-process JetStream server for tests, like
// net/http/httptest does for HTTP.
package bustest

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/nats-io/nkeys"

	"github.com/medgym/medgym/bus/embedded"
)

// StartJetStream starts an embedded nats-server with JetStream storing under
// t.TempDir() and returns its client URL. It is shut down at test cleanup.
func StartJetStream(t testing.TB) string {
	t.Helper()
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns.ClientURL()
}

// UserNKey makes a NATS user key pair: the seed (what a client's
// MEDGYM_NATS_NKEY file holds) and the public key (what the server's
// authorization block lists).
func UserNKey(t testing.TB) (seed []byte, public string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err = kp.Seed()
	if err == nil {
		public, err = kp.PublicKey()
	}
	if err != nil {
		t.Fatal(err)
	}
	return seed, public
}

// StartCluster starts n embedded nats-servers with JetStream routed into
// one cluster ("medgym", servers n1…nN) on 127.0.0.1 and waits until it
// has a JetStream meta leader. It returns the servers and a comma-separated
// seed URL of all of them (what --nats takes). They are shut down at test
// cleanup.
func StartCluster(t testing.TB, n int) ([]*server.Server, string) {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = freePort(t)
	}
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	servers := make([]*server.Server, n)
	var seeds []string
	for i := range servers {
		ns, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoSigs:     true,
			NoLog:      true,
			Cluster:    server.ClusterOpts{Name: "medgym", Host: "127.0.0.1", Port: ports[i]},
			Routes:     routes,
		})
		if err != nil {
			t.Fatal(err)
		}
		go ns.Start()
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatalf("cluster server n%d not ready", i+1)
		}
		servers[i] = ns
		seeds = append(seeds, ns.ClientURL())
	}
	WaitJetStreamCluster(t, servers)
	return servers, strings.Join(seeds, ",")
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// WaitJetStreamCluster waits until the servers form a ready JetStream
// cluster: one meta leader that counts every node as an online
// JetStream peer with current stats, and every node current with it: a
// leader alone is not enough, an R3 stream created before the others'
// stats reach it fails with "no suitable peers for placement".
func WaitJetStreamCluster(t testing.TB, servers []*server.Server) {
	t.Helper()
	n := len(servers)
	deadline := time.Now().Add(30 * time.Second)
	for {
		leaders, peers, current := 0, 0, 0
		for _, s := range servers {
			if s.JetStreamIsLeader() {
				leaders++
				peers = len(s.JetStreamClusterPeers())
			}
			if s.JetStreamIsCurrent() {
				current++
			}
		}
		if leaders == 1 && peers == n && current == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream cluster not ready after 30s: %d meta leaders, %d peers online, %d of %d current", leaders, peers, current, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
