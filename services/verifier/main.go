// Command verifier checks code executions against the ground truth,
// scores finished episodes and writes their trajectories to the store.
// See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/verifier/service"
	"github.com/medgym/medgym/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "verifier:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := flag.NewFlagSet("verifier", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats", envOr(getenv, "MEDGYM_NATS", "nats://127.0.0.1:4222"), "NATS URL, or several seed URLs of a cluster comma-separated (env MEDGYM_NATS)")
	data := fs.String("data", envOr(getenv, "MEDGYM_DATA", "../shared/data"), "shared data root: ground truth (env MEDGYM_DATA)")
	tasksDir := fs.String("tasks-dir", "", "upstream MedAgentGym task folder")
	storeURL := fs.String("store", envOr(getenv, "MEDGYM_STORE", "runs"), "trajectory store: a directory or s3://bucket/prefix (env MEDGYM_STORE)")
	endpoint := fs.String("s3-endpoint", "", "S3 endpoint host:port (default $AWS_ENDPOINT_URL); credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY")
	insecure := fs.Bool("s3-insecure", false, "plain HTTP to the S3 endpoint")
	conc := fs.Int("concurrency", 32, "episodes scored and stored at once (rows per Parquet file at most)")
	formatReward := fs.Float64("format-reward", 0, "reward added when every turn parsed (paper's GRPO setup); 0 = off")
	penalty := fs.Float64("wrong-answer-penalty", 0, "EHRSQL 2024's c on tasks that offer abstention: reward −c for a wrong answer or no answer, 1 for a right answer or a right abstention, 0 for a wrong abstention; 0 = off")
	gradedML := fs.Bool("graded-ml", false, "reward predictions tasks with their accuracy instead of 1/0 (upstream's EHRSHOT style)")
	library := fs.String("library", envOr(getenv, "MEDGYM_LIBRARY", "build/library"), "generated task library (env MEDGYM_LIBRARY)")
	metricsAddr := fs.String("metrics", envOr(getenv, "MEDGYM_METRICS", "127.0.0.1:9104"), "address of /metrics and /healthz: loopback by default; in a container or pod its own IP or host name (e.g. $POD_IP:9104); port 0 picks a free port (logged); taken: a warning (see --metrics-required); empty: off (env MEDGYM_METRICS)")
	var natsTLS bus.TLS
	natsTLS.RegisterFlags(fs, getenv)
	var start bus.StartFlags
	start.RegisterFlags(fs, getenv)
	ackWait := fs.Duration("ack-wait", 60*time.Second, "how long a message may go unacked (in-progress acks keep long work alive) before another process gets it")
	giveUp := fs.Duration("store-give-up", service.DefaultStoreGiveUp, "how long the store may refuse every row of a run before the run fails with its error (instead of its episodes being retried forever)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("service", "verifier")
	log.Info("config", "nats", schemas.RedactURL(*natsURL), "data", *data, "store", *storeURL, "concurrency", *conc)
	auth, err := bus.AuthFromEnv(getenv)
	if err != nil {
		return err
	}
	startOpts, err := start.Options()
	if err != nil {
		return err
	}
	conn, metrics, err := bus.Start(ctx, *natsURL, "verifier", *metricsAddr, log, append(startOpts, bus.WithTLS(natsTLS), bus.WithAuth(auth))...)
	if err != nil {
		return err
	}
	defer conn.Close()
	return service.Run(ctx, conn, service.Config{Metrics: metrics, AckWait: *ackWait,
		DataRoot: *data, TasksDir: *tasksDir, LibraryDir: *library, Store: *storeURL,
		StoreOptions: store.Options{Endpoint: *endpoint, UseSSL: !*insecure},
		Concurrency:  *conc, FormatReward: *formatReward, GradedML: *gradedML,
		WrongAnswerPenalty: *penalty, StoreGiveUp: *giveUp,
	}, log)
}

func envOr(getenv func(string) string, k, def string) string {
	if v := getenv(k); v != "" {
		return v
	}
	return def
}
