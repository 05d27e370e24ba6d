package verifier

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/services/verifier/verify"
	"github.com/medgym/medgym/store"
)

// Config of the verifier. RegisterFlags fills it for the verifier's main
// and for `medgym run/serve`; tests build it literally. Zero durations and
// concurrency take the defaults.
type Config struct {
	// Metrics, when set, measures the handlers (see bus.Metrics).
	Metrics    *bus.Metrics
	DataRoot   string
	TasksDir   string
	LibraryDir string
	// Store is a directory or s3://bucket/prefix; StoreOptions has the S3
	// endpoint and credentials.
	Store        string
	StoreOptions store.Options
	// Concurrency bounds episodes being scored and stored at once; it is
	// also the most rows one Parquet file holds.
	Concurrency int
	// BatchAge rolls a file at least this often while episodes arrive.
	BatchAge time.Duration
	// BatchIdle, when > 0, also rolls a file once no episode arrived for
	// this long, so a lone episode (an interactive session's) is stored,
	// and its score published, without waiting out BatchAge.
	BatchIdle time.Duration
	// Scoring are the reward settings; `medgym replay` scores with the same.
	Scoring Scoring
	AckWait time.Duration
	// StoreGiveUp is how long the store may refuse every row of a run
	// before the verifier gives up on the episodes it cannot store (default 5 min):
	// each becomes a dead letter with the store's error, which fails its
	// run, instead of being retried forever. Shorter outages (a restart)
	// are ridden out.
	StoreGiveUp time.Duration
}

// RegisterFlags adds the verifier's flags (env fallbacks for the data
// root, library and store).
func (c *Config) RegisterFlags(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&c.DataRoot, "data", bus.EnvOr(getenv, "MEDGYM_DATA", "../shared/data"), "shared data root: ground truth (env MEDGYM_DATA)")
	fs.StringVar(&c.TasksDir, "tasks-dir", "", "upstream MedAgentGym task folder")
	fs.StringVar(&c.LibraryDir, "library", bus.EnvOr(getenv, "MEDGYM_LIBRARY", "build/library"), "generated task library (env MEDGYM_LIBRARY)")
	fs.StringVar(&c.Store, "store", bus.EnvOr(getenv, "MEDGYM_STORE", "runs"), "trajectory store: a directory or s3://bucket/prefix (env MEDGYM_STORE)")
	c.StoreOptions.UseSSL = true
	fs.StringVar(&c.StoreOptions.Endpoint, "s3-endpoint", "", "S3 endpoint host:port (default $AWS_ENDPOINT_URL); credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY")
	fs.StringVar(&c.StoreOptions.Region, "s3-region", "", "S3 region (default $AWS_REGION)")
	fs.BoolFunc("s3-insecure", "plain HTTP to the S3 endpoint", func(v string) error {
		insecure, err := strconv.ParseBool(v)
		c.StoreOptions.UseSSL = !insecure
		return err
	})
	fs.IntVar(&c.Concurrency, "concurrency", 32, "episodes scored and stored at once (rows per Parquet file at most)")
	fs.DurationVar(&c.BatchAge, "batch-age", time.Second, "roll a Parquet file at least this often while episodes arrive")
	fs.DurationVar(&c.BatchIdle, "batch-idle", 0, "also roll a Parquet file once no episode arrived for this long (0: off; medgym env serve defaults to 20ms, so a session's final step does not wait out --batch-age)")
	fs.DurationVar(&c.StoreGiveUp, "store-give-up", DefaultStoreGiveUp, "how long the store may refuse every row of a run before the run fails with its error (instead of its episodes being retried forever)")
	fs.DurationVar(&c.AckWait, "ack-wait", 60*time.Second, "how long a message may go unacked (in-progress acks keep long work alive) before another process gets it")
	c.Scoring.RegisterFlags(fs)
}

// Validate rejects a configuration the verifier would misread.
func (c Config) Validate() error {
	if c.Concurrency < 0 {
		return fmt.Errorf("verifier: --concurrency %d: must be ≥ 1 (0: the default)", c.Concurrency)
	}
	if c.BatchAge < 0 || c.BatchIdle < 0 || c.AckWait < 0 || c.StoreGiveUp < 0 {
		return errors.New("verifier: --batch-age, --batch-idle, --ack-wait and --store-give-up must not be negative")
	}
	return c.Scoring.Validate()
}

// LogValue is the configuration logged at start.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("data", c.DataRoot), slog.String("store", c.Store), slog.Int("concurrency", c.Concurrency),
		slog.Float64("format_reward", c.Scoring.FormatReward), slog.Bool("graded_ml", c.Scoring.GradedML),
		slog.Float64("wrong_answer_penalty", c.Scoring.WrongAnswerPenalty))
}

// Scoring are the verifier's reward settings. The service and `medgym
// replay` both score through Scoring.Options, so a setting cannot reach
// one and not the other.
type Scoring struct {
	// FormatReward is added for episodes whose every turn parsed.
	FormatReward float64
	// GradedML rewards predictions tasks with their accuracy (verify.Options).
	GradedML bool
	// WrongAnswerPenalty is the reward penalty on tasks that offer
	// abstention (verify.Options).
	WrongAnswerPenalty float64
}

// RegisterFlags adds --format-reward, --graded-ml and --wrong-answer-penalty.
func (s *Scoring) RegisterFlags(fs *flag.FlagSet) {
	fs.Float64Var(&s.FormatReward, "format-reward", 0, "reward added when every turn parsed (paper's GRPO setup); 0 = off")
	fs.Float64Var(&s.WrongAnswerPenalty, "wrong-answer-penalty", 0, "EHRSQL 2024's c on tasks that offer abstention: reward −c for a wrong answer or no answer, 1 for a right answer or a right abstention, 0 for a wrong abstention; 0 = off")
	fs.BoolVar(&s.GradedML, "graded-ml", false, "reward predictions tasks with their accuracy instead of 1/0 (upstream's EHRSHOT style)")
}

// Validate rejects a penalty that is negative (it would reward wrong
// answers) or not finite.
func (s Scoring) Validate() error {
	if p := s.WrongAnswerPenalty; p < 0 || math.IsNaN(p) || math.IsInf(p, 0) {
		return fmt.Errorf("verifier: wrong-answer penalty %v: want a finite number ≥ 0 (it is subtracted)", p)
	}
	if f := s.FormatReward; math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("verifier: format reward %v: want a finite number", f)
	}
	return nil
}

func (s Scoring) Options(mode verify.Mode) verify.Options {
	return verify.Options{Mode: mode, FormatReward: s.FormatReward, GradedML: s.GradedML, WrongAnswerPenalty: s.WrongAnswerPenalty}
}

// Serve runs the verifier with this configuration, measured by metrics.
func (c Config) Serve(ctx context.Context, conn *bus.Conn, metrics *bus.Metrics, log *slog.Logger) error {
	c.Metrics = metrics
	return Run(ctx, conn, c, log)
}
