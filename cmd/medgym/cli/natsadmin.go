package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
)

// cmdNATS is `medgym nats provision|verify`: the one place that creates the
// streams, buckets, object store and durable consumers on a server with
// users (deploy/nats), run as its admin user; services running as their
// own users only verify them (bus.ProvisionMode, ADR 0028).
func cmdNATS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "provision" && args[0] != "verify") {
		fmt.Fprintln(stderr, "usage: medgym nats provision|verify [--nats URL] [--replicas N] [flags]")
		return errors.New("medgym nats: want provision or verify")
	}
	sub := args[0]
	fs := flag.NewFlagSet("nats "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	nats := fs.String("nats", "nats://127.0.0.1:4222", "NATS URL, or several seed URLs of a cluster comma-separated")
	var tlsf bus.TLS
	tlsf.RegisterFlags(fs, os.Getenv)
	var streams bus.StreamOptions
	streams.RegisterFlags(fs, os.Getenv)
	var timeout time.Duration
	var timeoutErr error
	bus.RegisterConnectTimeout(fs, os.Getenv, &timeout, &timeoutErr)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := errors.Join(streams.Validate(), timeoutErr); err != nil {
		return err
	}
	auth, err := bus.AuthFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	log := NewLogger(stderr, "warn")
	conn, err := bus.Connect(ctx, *nats, "medgym-nats-"+sub, log, bus.WithTLS(tlsf), bus.WithAuth(auth),
		bus.WithConnectTimeout(timeout), bus.WithProvision(bus.ProvisionCreate))
	if err != nil {
		return err
	}
	defer conn.Close()
	if sub == "verify" {
		if err := bus.Verify(ctx, conn, streams); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "medgym nats verify: streams, buckets, object store and %d durable consumers on %s are as provisioned\n",
			len(bus.Durables), schemas.RedactURL(*nats))
		return nil
	}
	if err := bus.Provision(ctx, conn, streams); err != nil {
		return fmt.Errorf("medgym nats provision (as %s; only the admin user of deploy/nats may): %w", auth, err)
	}
	fmt.Fprintf(stdout, "medgym nats provision: %d streams, key-value buckets, the blob object store and %d durable consumers ready on %s\n",
		len(schemas.StreamSubjects), len(bus.Durables), schemas.RedactURL(*nats))
	return nil
}
