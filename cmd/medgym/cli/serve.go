package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
)

// cmdServe runs every service in one process against an external server.
func cmdServe(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f ServiceFlags
	f.Register(fs)
	nats := fs.String("nats", "nats://127.0.0.1:4222", "NATS URL, or several seed URLs of a cluster comma-separated")
	llmURL := fs.String("llm-url", "", "default OpenAI-compatible base URL")
	connectTimeout := fs.Duration("connect-timeout", 0, bus.ConnectTimeoutUsage+" (default 0: wait until stopped)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := f.Validate(); err != nil {
		return err
	}
	log := NewLogger(stderr, f.LogLevel)
	auth, err := bus.AuthFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	if *connectTimeout < 0 {
		return fmt.Errorf("--connect-timeout %s: must be ≥ 0 (0: wait until stopped)", *connectTimeout)
	}
	conn, err := bus.Connect(ctx, *nats, "medgym-serve", log, bus.WithTLS(f.NATSTLS), bus.WithAuth(auth), bus.WithConnectTimeout(*connectTimeout),
		bus.WithProvision(f.Provision))
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := bus.PrepareStreams(ctx, conn, f.Streams); err != nil {
		return err
	}
	fmt.Fprintln(stderr, "medgym serve: dispatcher, llm-worker, sandbox-worker and verifier on", schemas.RedactURL(*nats))
	return StartServices(ctx, conn, &f, *llmURL, log)()
}
