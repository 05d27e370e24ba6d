// Package embedded runs an in-process nats-server with JetStream, the way
// `medgym run` works without external infrastructure. The server is real:
// the same code as the nats-server binary, with a file store.
//
// A server started with InProcess opens no socket at all: only the process
// that started it can connect (bus.WithInProcess), so no other local user or
// process can read or rewrite its streams and buckets. The commands use
// that; tests that want a URL (several clients, restarts on a port) listen
// on 127.0.0.1.
package embedded

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options for Start.
type Options struct {
	// StoreDir is the JetStream file store directory.
	StoreDir string
	// Port to listen on (default: a random free port on 127.0.0.1).
	Port int
	// MaxPayload in bytes (default 8 MiB: trajectories are large).
	MaxPayload int32
	// InProcess: listen nowhere (nats-server's DontListen); connect
	// through the server's InProcessConn (bus.WithInProcess). Port is
	// ignored and ClientURL names no reachable address.
	InProcess bool
	// MaxFileStore bounds JetStream's file store in bytes (default: the
	// server's, 75% of the volume's free space).
	MaxFileStore int64
}

// Start starts a server and waits until it accepts connections.
func Start(o Options) (*server.Server, error) {
	if o.Port == 0 {
		o.Port = server.RANDOM_PORT
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = 8 << 20
	}
	ns, err := server.NewServer(&server.Options{
		ServerName:        "medgym-embedded",
		Host:              "127.0.0.1",
		Port:              o.Port,
		JetStream:         true,
		StoreDir:          o.StoreDir,
		JetStreamMaxStore: o.MaxFileStore,
		MaxPayload:        o.MaxPayload,
		DontListen:        o.InProcess,
		NoSigs:            true,
		NoLog:             true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats-server: not ready after 10s (store %s)", o.StoreDir)
	}
	return ns, nil
}
