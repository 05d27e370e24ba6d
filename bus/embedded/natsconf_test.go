package embedded_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/schemas"
)

// TestDeployNATSConfListensOnLoopback (issue 13 item 10): deploy/nats/nats.conf
// listened on 0.0.0.0 with monitoring open. Parsed by nats-server itself.
func TestDeployNATSConfListensOnLoopback(t *testing.T) {
	setPasswords(t)
	o, err := server.ProcessConfigFile("../../deploy/nats/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if o.Host != "127.0.0.1" || o.Port != 4222 {
		t.Errorf("clients on %s:%d, want 127.0.0.1:4222", o.Host, o.Port)
	}
	if o.HTTPHost != "127.0.0.1" || o.HTTPPort != 8222 {
		t.Errorf("monitoring on %s:%d, want 127.0.0.1:8222", o.HTTPHost, o.HTTPPort)
	}
	if len(o.Users) == 0 || o.NoAuthUser != "" {
		t.Errorf("%d users, no_auth_user %q: authorisation is off", len(o.Users), o.NoAuthUser)
	}
	if !o.JetStream || o.MaxPayload != 8<<20 {
		t.Errorf("jetstream %v, max payload %d", o.JetStream, o.MaxPayload)
	}
}

// setPasswords gives every user of deploy/nats/auth.conf the password
// "test", through the environment as nats-server reads it.
func setPasswords(t *testing.T) {
	for _, v := range bustest.DeployPasswordVars(t, "../../deploy/nats/auth.conf") {
		t.Setenv(v, "test")
	}
}

// TestDeployClusterConf (issue 17): deploy/nats/cluster.conf, parsed by
// nats-server itself three times with each node's environment, forms a
// 3-node JetStream cluster whose routes demand the shared password, and
// the services' R3 streams live on it.
func TestDeployClusterConf(t *testing.T) {
	ports := make([]int, 6)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	setPasswords(t)
	t.Setenv("NATS_ROUTE_PASSWORD", "route-secret")
	for i := range 3 {
		t.Setenv(fmt.Sprintf("NATS_ROUTE_%d", i+1), fmt.Sprintf("nats-route://route:route-secret@127.0.0.1:%d", ports[3+i]))
	}
	var seeds []string
	var servers []*server.Server
	for i := range 3 {
		t.Setenv("NATS_SERVER_NAME", fmt.Sprintf("n%d", i+1))
		t.Setenv("NATS_CLIENT_LISTEN", fmt.Sprintf("127.0.0.1:%d", ports[i]))
		t.Setenv("NATS_CLUSTER_LISTEN", fmt.Sprintf("127.0.0.1:%d", ports[3+i]))
		t.Setenv("NATS_STORE_DIR", t.TempDir())
		o, err := server.ProcessConfigFile("../../deploy/nats/cluster.conf")
		if err != nil {
			t.Fatal(err)
		}
		if o.Cluster.Name != "medgym" || len(o.Routes) != 3 || o.Cluster.Username != "route" || o.Cluster.Password != "route-secret" {
			t.Fatalf("cluster %+v, routes %v", o.Cluster, o.Routes)
		}
		if o.HTTPHost != "127.0.0.1" || !o.JetStream || o.MaxPayload != 8<<20 {
			t.Errorf("monitoring on %s, jetstream %v, max payload %d", o.HTTPHost, o.JetStream, o.MaxPayload)
		}
		o.HTTPPort = 0 // three nodes on one host here
		o.NoSigs, o.NoLog = true, true
		ns, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go ns.Start()
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatalf("n%d not ready", i+1)
		}
		seeds = append(seeds, ns.ClientURL())
		servers = append(servers, ns)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bustest.WaitJetStreamCluster(t, servers)
	// Authorisation is on (auth.conf): stream administration is admin's.
	if _, err := bus.Connect(ctx, strings.Join(seeds, ","), "anonymous", slog.New(slog.DiscardHandler)); err == nil {
		t.Error("the cluster let a client in without credentials")
	}
	conn, err := bus.Connect(ctx, strings.Join(seeds, ","), "t", slog.New(slog.DiscardHandler), bus.WithAuth(bus.Auth{User: "admin", Password: "test"}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	p, err := conn.StreamPlacement(ctx, schemas.StreamEpisodes)
	if err != nil {
		t.Fatal(err)
	}
	if p.Replicas != 3 || p.Cluster != "medgym" || len(p.Followers) != 2 {
		t.Errorf("episodes stream: %+v", p)
	}
}
