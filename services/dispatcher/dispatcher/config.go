package dispatcher

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/services/dispatcher/internal/dispatch"
)

// RegisterFlags adds the dispatcher's flags; MEDGYM_DATA, MEDGYM_LIBRARY
// and MEDGYM_MAX_EPISODES are their environment fallbacks (a malformed
// MEDGYM_MAX_EPISODES is Validate's error).
func (c *Config) RegisterFlags(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&c.DataRoot, "data", bus.EnvOr(getenv, "MEDGYM_DATA", "../shared/data"), "shared data root (env MEDGYM_DATA)")
	fs.StringVar(&c.LibraryDir, "library", bus.EnvOr(getenv, "MEDGYM_LIBRARY", "build/library"), "generated task library (env MEDGYM_LIBRARY)")
	defMax := dispatch.DefaultMaxEpisodes
	if v := getenv("MEDGYM_MAX_EPISODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			c.envErr = fmt.Errorf("MEDGYM_MAX_EPISODES: %q is not an integer ≥ 1", v)
		}
		defMax = n
	}
	c.MaxEpisodes = defMax
	fs.Func("max-episodes", fmt.Sprintf("most episodes (tasks × samples) of one run; larger runs are refused (env MEDGYM_MAX_EPISODES) (default %d)", defMax), func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("must be an integer ≥ 1, got %q", v)
		}
		c.MaxEpisodes = n
		return nil
	})
	fs.IntVar(&c.MaxInFlightTotal, "max-in-flight-total", dispatch.DefaultMaxInFlightTotal,
		"most episodes in flight across the runs this dispatcher drives, shared fairly among them (each run also keeps to its own max_in_flight); -1: no bound beyond each run's")
	fs.DurationVar(&c.Reconcile, "reconcile", DefaultReconcile,
		"how often the dispatcher looks for episodes lost in the pipeline (published, unscored, no message waiting or being handled; two looks in a row) and records them as infra_failure")
	fs.DurationVar(&c.Tick, "tick", 500*time.Millisecond, "how often a run's admission loop re-counts scores when no score event woke it")
}

// Validate rejects a configuration the dispatcher would misread.
func (c Config) Validate() error {
	if c.envErr != nil {
		return c.envErr
	}
	if c.MaxEpisodes < 0 {
		return fmt.Errorf("--max-episodes must be ≥ 1, got %d (0: the default)", c.MaxEpisodes)
	}
	if c.MaxInFlightTotal < -1 {
		return fmt.Errorf("--max-in-flight-total must be ≥ 1, or -1 for no bound, got %d (0: the default)", c.MaxInFlightTotal)
	}
	if c.Reconcile < 0 {
		return fmt.Errorf("--reconcile %s: must be positive (0: the default)", c.Reconcile)
	}
	if c.Tick < 0 {
		return fmt.Errorf("--tick %s: must be positive", c.Tick)
	}
	return nil
}

// LogValue is the configuration logged at start.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("data", c.DataRoot), slog.String("library", c.LibraryDir), slog.Int("max_episodes", c.MaxEpisodes),
		slog.Int("max_in_flight_total", c.MaxInFlightTotal))
}

// Serve runs the dispatcher with this configuration, measured by metrics.
func (c Config) Serve(ctx context.Context, conn *bus.Conn, metrics *bus.Metrics, log *slog.Logger) error {
	c.Metrics = metrics
	return Run(ctx, conn, c, log)
}
