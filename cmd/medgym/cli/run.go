package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/llm-worker/policy"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/tasks"
)

// RunFlags are the flags of `medgym run`: the run spec's fields, the
// shared service flags, and where to run (--nats, --state).
type RunFlags struct {
	ServiceFlags
	NATS  string
	State string
	// ConnectTimeout bounds the wait for a --nats server that is not
	// reachable yet (default 1m; 0: wait until stopped).
	ConnectTimeout time.Duration
	RunID          string
	Datasets       string
	Split          string
	Limit          int
	Seed           int64
	Categories     string
	TaskIDs        string
	Samples        int
	Temperatures   string
	PolicySeed     *int64
	Policy         string
	LLMURL         string
	Model          string
	APIKeyEnv      string
	MaxTokens      int
	Logprobs       bool
	MaxTurns       int
	EndOn          string
	ShowVerdict    bool
	LoopGuard      string
	VerifierMode   string
	Labels         string
	ActionTO       int
	EpisodeTO      int
	MaxInFlight    int
	Quiet          bool
	SpecFile       string
	// upstreamCompat starts the options from schemas.UpstreamOptions;
	// explicit holds the flags given on the command line (set by cmdRun),
	// so that one contradicting upstream's rules is an error, and so that
	// with --nats an explicit --store other than the verifier's is one.
	UpstreamCompat bool
	Explicit       map[string]bool
}

// upstreamOptionFlags are the flags whose option --upstream-compat fixes.
var upstreamOptionFlags = []string{"max-turns", "end-on", "show-verdict", "loop-guard", "verifier-mode", "action-timeout", "episode-timeout"}

// Register defines the run flags on fs.
func (f *RunFlags) Register(fs *flag.FlagSet) {
	f.ServiceFlags.Register(fs)
	fs.StringVar(&f.NATS, "nats", "", "NATS URL of running services, or several seed URLs of a cluster comma-separated (default: embedded server and in-process services)")
	fs.StringVar(&f.State, "state", ".medgym", "directory for the embedded JetStream file store")
	fs.DurationVar(&f.ConnectTimeout, "connect-timeout", time.Minute, "with --nats: "+bus.ConnectTimeoutUsage+" (0: wait until stopped)")
	fs.StringVar(&f.RunID, "run-id", "", "run id (default: generated); resubmitting the same id continues that run")
	fs.StringVar(&f.Datasets, "dataset", "medcalcbench", "dataset(s), comma separated")
	fs.StringVar(&f.Split, "split", "test", "split: test or train")
	fs.IntVar(&f.Limit, "limit", 0, "at most this many tasks in all, counted across the datasets in order (0 = all; a limit per dataset: one run per dataset)")
	fs.Int64Var(&f.Seed, "sample-seed", 0, "with --limit: take a seeded sample instead of the first tasks")
	fs.StringVar(&f.Categories, "category", "", "only these categories, comma separated")
	fs.StringVar(&f.TaskIDs, "task", "", "only these task ids, comma separated")
	fs.IntVar(&f.Samples, "samples", 1, "samples per task (K)")
	fs.StringVar(&f.Temperatures, "temperatures", "", "per-sample temperature schedule, e.g. 0,0.6 (sample k uses entry min(k, n-1))")
	fs.Func("seed", "sampling seed sent to the model for sample 0; sample k gets seed+k (default: none)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("not an integer: %q", v)
		}
		f.PolicySeed = &n
		return nil
	})
	fs.StringVar(&f.Policy, "policy", "reference", "policy: reference (replays reference solutions) or openai")
	fs.StringVar(&f.LLMURL, "llm-url", "", "OpenAI-compatible base URL, e.g. http://localhost:8000/v1")
	fs.StringVar(&f.Model, "model", "", "model name for --policy openai")
	fs.StringVar(&f.APIKeyEnv, "api-key-env", "OPENAI_API_KEY", "environment variable holding the API key, or naming its file with a _FILE suffix (read by the llm-worker)")
	fs.IntVar(&f.MaxTokens, "max-tokens", 8192, "max completion tokens per turn")
	fs.BoolVar(&f.Logprobs, "logprobs", false, "request token ids and logprobs (vLLM) for RL")
	fs.IntVar(&f.MaxTurns, "max-turns", 15, "policy steps per episode")
	fs.StringVar(&f.EndOn, "end-on", schemas.DefaultOptions().EndOn, "what ends an episode: answer (only an explicit answer: no code run is checked "+
		"before the agent commits), accepted (upstream: the first accepted code run) or both; accepted and both make every checked code run a "+
		"correctness oracle, which a policy trained on the reward learns to exploit")
	fs.BoolVar(&f.ShowVerdict, "show-verdict", false, "show the verifier's verdict on code runs to the model (upstream: no)")
	fs.StringVar(&f.LoopGuard, "loop-guard", "warn", "repeated identical action: off, warn or stop")
	fs.StringVar(&f.VerifierMode, "verifier-mode", "strict", "strict or upstream (upstream-compatible rules, bugs included)")
	fs.StringVar(&f.Labels, "labels", "", "label sets to score against, comma separated, one per dataset (e.g. medcalcbench@v1.0; `medgym tasks labels` lists them); "+
		"a dataset not named gets its corrected set under strict rules, the benchmark's own labels under upstream rules")
	fs.IntVar(&f.ActionTO, "action-timeout", 120, "seconds per action")
	fs.IntVar(&f.EpisodeTO, "episode-timeout", 0, "seconds per episode (0 = none)")
	fs.IntVar(&f.MaxInFlight, "max-in-flight", 64, "episodes in flight at once")
	fs.BoolVar(&f.Quiet, "quiet", false, "no progress line")
	fs.StringVar(&f.SpecFile, "spec", "", "run spec file (YAML or JSON, keys as schemas.RunSpec); flags given explicitly override it")
	fs.BoolVar(&f.UpstreamCompat, "upstream-compat", false, "MedAgentGym's episode rules as well as its verifier rules "+
		"(options.compat upstream): upstream's four actions only, the first accepted execution ends the episode, the turn "+
		"limit is a failure, 15 steps, 120 s per execution, no loop guard, --verifier-mode upstream")
}

// compatConflict is the error of an option flag given with --upstream-compat.
func (f *RunFlags) compatConflict() error {
	if !f.UpstreamCompat {
		return nil
	}
	for _, name := range upstreamOptionFlags {
		if f.Explicit[name] {
			return fmt.Errorf("--upstream-compat fixes --%s to upstream's rule; drop --%s", name, name)
		}
	}
	return nil
}

// Spec is the run spec the flags describe (with a fresh run id when
// --run-id is empty); cmdRun overlays a spec file on it.
func (f *RunFlags) Spec() (schemas.RunSpec, error) {
	opts := schemas.DefaultOptions()
	opts.MaxTurns, opts.EndOn, opts.ShowVerdict = f.MaxTurns, f.EndOn, f.ShowVerdict
	opts.LoopGuard, opts.VerifierMode = f.LoopGuard, f.VerifierMode
	opts.ActionTimeoutSec, opts.EpisodeTimeoutSec = f.ActionTO, f.EpisodeTO
	if err := f.compatConflict(); err != nil {
		return schemas.RunSpec{}, err
	}
	if f.UpstreamCompat {
		opts = schemas.UpstreamOptions()
	}
	opts.LabelSets = splitList(f.Labels) // a label set choice holds under either rules
	// Credentials in --llm-url stay in this process (its in-process
	// llm-worker uses them): the spec, which is published and stored, gets
	// the URL without them. A remote llm-worker needs its own --llm-url.
	pol := schemas.PolicySpec{Name: f.Policy, Model: f.Model, BaseURL: schemas.StripUserinfo(f.LLMURL), APIKeyEnv: f.APIKeyEnv,
		MaxTokens: f.MaxTokens, Logprobs: f.Logprobs, Seed: f.PolicySeed}
	if f.Policy == schemas.PolicyReference {
		pol.Model = "reference-solution" // labelled as such everywhere it appears
	}
	var temps []float64
	for _, s := range splitList(f.Temperatures) {
		t, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return schemas.RunSpec{}, fmt.Errorf("--temperatures: %q is not a number", s)
		}
		if err := schemas.ValidTemperature(t); err != nil {
			return schemas.RunSpec{}, fmt.Errorf("--temperatures: %w", err)
		}
		temps = append(temps, t)
	}
	id := f.RunID
	if id == "" {
		b := make([]byte, 3)
		_, _ = rand.Read(b)
		id = time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b)
	}
	spec := schemas.RunSpec{
		RunID: id, Datasets: splitList(f.Datasets), Split: f.Split, TasksDir: f.TasksDir,
		Categories: splitList(f.Categories), TaskIDs: splitList(f.TaskIDs), Limit: f.Limit, SampleSeed: f.Seed,
		Samples: f.Samples, Temperatures: temps, Policy: pol, Options: opts, MaxInFlight: f.MaxInFlight,
		SubmittedAt: time.Now().UTC(),
	}
	return spec, spec.Validate()
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f RunFlags
	f.Register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	f.Explicit = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.Explicit[fl.Name] = true })
	if err := f.ServiceFlags.Validate(); err != nil {
		return err
	}
	if f.NATS == "" && f.Streams.Replicas > 1 {
		return fmt.Errorf("--replicas %d needs --nats: the embedded server is a single node (R1)", f.Streams.Replicas)
	}
	if f.ConnectTimeout < 0 {
		return fmt.Errorf("--connect-timeout %s: must be ≥ 0 (0: wait until stopped)", f.ConnectTimeout)
	}
	if err := f.compatConflict(); err != nil {
		return err
	}
	spec, err := f.Spec()
	if f.SpecFile != "" {
		file, ferr := loadSpecFile(f.SpecFile)
		if ferr != nil {
			return ferr
		}
		spec, err = overlay(fs, file, spec), nil
		if err = spec.Validate(); err != nil {
			return fmt.Errorf("run spec %s: %w", f.SpecFile, err)
		}
	}
	if err != nil {
		return err
	}
	res, err := RunSpec(ctx, spec, &f, stderr)
	if err != nil {
		return err
	}
	PrintSummary(stdout, res)
	return nil
}

// RunResult summarises a finished run.
type RunResult struct {
	RunID    string
	Total    int
	Outcomes map[schemas.Outcome]int
	Store    string
	Elapsed  time.Duration
}

// scoredRate renders "62.5% of 8 scored" (correct: the solved episodes),
// plus ", 7 infra_failure not scored" when any episode failed for
// infrastructure reasons.
func scoredRate(correct, scored, infra int) string {
	rate := 0.0
	if scored > 0 {
		rate = 100 * float64(correct) / float64(scored)
	}
	s := fmt.Sprintf("%.1f%% of %d scored", rate, max(scored, 0))
	if infra > 0 {
		s += fmt.Sprintf(", %d %s not scored", infra, schemas.OutcomeInfraFailure)
	}
	return s
}

// Solved counts the episodes that reached their task's correct outcome
// (a correct answer or a correct abstention).
func Solved(outcomes map[schemas.Outcome]int) int {
	n := 0
	for o, c := range outcomes {
		if o.Solved() {
			n += c
		}
	}
	return n
}

// PrintSummary prints the run's line. The success rate is of the scored
// episodes: infra failures are never the model's, so they are left out of
// it and counted next to it, where they cannot be missed.
func PrintSummary(w io.Writer, r RunResult) {
	infra := r.Outcomes[schemas.OutcomeInfraFailure]
	fmt.Fprintf(w, "run %s: %d episodes, success %s (%d correct", r.RunID, r.Total, scoredRate(Solved(r.Outcomes), r.Total-infra, infra), r.Outcomes[schemas.OutcomeCorrect])
	keys := make([]string, 0, len(r.Outcomes))
	for k := range r.Outcomes {
		if k != schemas.OutcomeCorrect {
			keys = append(keys, string(k))
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, ", %d %s", r.Outcomes[schemas.Outcome(k)], k)
	}
	fmt.Fprintf(w, ") in %s\ntrajectories: %s\n", r.Elapsed.Round(time.Millisecond), filepath.ToSlash(r.Store))
}

// preflight fails fast, with the fix, on what would make every episode fail,
// and on a run larger than --max-episodes.
func preflight(ctx context.Context, spec schemas.RunSpec, f *RunFlags) error {
	if err := checkSize(spec, 1, f.MaxEpisodes); err != nil { // before loading any task
		return err
	}
	selected := 0
	for _, ds := range spec.Datasets {
		ts, err := tasks.Load(ctx, tasks.Source{Dataset: ds, Split: spec.Split, DataRoot: f.Data, TasksDir: f.TasksDir, LibraryDir: f.Library})
		if err != nil {
			return fmt.Errorf("%w (data root %s; set --data or MEDGYM_DATA)", err, f.Data)
		}
		if len(ts) == 0 {
			return fmt.Errorf("dataset %s has no %s tasks (try --split test)", ds, spec.Split)
		}
		if spec.Policy.Name == schemas.PolicyReference {
			if err := haveReferences(ds, ts, f.TasksDir != "" || spec.TasksDir != ""); err != nil {
				return err
			}
		}
		// The dispatcher's own selection (tasks.Select), per dataset before
		// the limit, which counts across datasets.
		all := spec
		all.Limit = 0
		sel := tasks.Select(all, ts)
		if err := tasks.CheckRunLabels(sel, spec.Options.VerifierMode == "upstream", spec.Options.LabelSets); err != nil {
			return fmt.Errorf("--labels: %w", err)
		}
		selected += len(sel)
	}
	if spec.Limit > 0 {
		selected = min(selected, spec.Limit)
	}
	if err := checkSize(spec, selected, f.MaxEpisodes); err != nil {
		return err
	}
	if spec.Policy.Name == schemas.PolicyOpenAI {
		if spec.Policy.BaseURL == "" {
			return errors.New("--policy openai needs --llm-url (an OpenAI-compatible base URL such as http://localhost:8000/v1)")
		}
		base := spec.Policy.BaseURL
		if f.LLMURL != "" && schemas.StripUserinfo(f.LLMURL) == base {
			base = f.LLMURL // with its credentials, if any
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/models", nil)
		if err != nil {
			return fmt.Errorf("--llm-url %q: %w", schemas.RedactURL(base), errors.Unwrap(err))
		}
		k, err := schemas.Secret(os.Getenv, spec.Policy.APIKeyEnv)
		if err != nil {
			return fmt.Errorf("--api-key-env: %w", err)
		}
		if k != "" {
			req.Header.Set("Authorization", "Bearer "+k)
		}
		c, err := policy.HTTPClient(f.LLM.LLM.CAFile)
		if err != nil {
			return err
		}
		if c == nil {
			c = &http.Client{}
		}
		c.Timeout = 10 * time.Second
		resp, err := c.Do(req)
		if err != nil {
			return fmt.Errorf("model endpoint %s is unreachable: %v (start the server or fix --llm-url)", spec.Policy.BaseURL, errors.Unwrap(err))
		}
		_ = resp.Body.Close()
		// A server that is down for a while is waited out (ADR 24); a URL
		// that is not the API's base, or refused credentials, would fail
		// every episode.
		switch resp.StatusCode {
		case http.StatusNotFound:
			hint := "it usually ends in /v1"
			if b := strings.TrimRight(spec.Policy.BaseURL, "/"); !strings.HasSuffix(b, "/v1") {
				hint = "did you mean " + b + "/v1?"
			}
			return fmt.Errorf("model endpoint %s answered 404 for GET /models: --llm-url must be the OpenAI-compatible base URL (%s)", spec.Policy.BaseURL, hint)
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("model endpoint %s refused the credentials (%s for GET /models): set the key's variable (--api-key-env) or fix --llm-url", spec.Policy.BaseURL, resp.Status)
		}
	}
	return nil
}

// haveReferences refuses a reference-policy run over tasks without a
// reference solution: every such episode would end as infra_failure.
func haveReferences(ds string, ts []tasks.Task, upstream bool) error {
	missing := 0
	for i := range ts {
		if ts[i].Reference == "" {
			missing++
		}
	}
	switch {
	case missing == 0:
		return nil
	case upstream:
		return fmt.Errorf("--policy reference cannot play --tasks-dir tasks: upstream MedAgentGym task files carry no reference solutions (%d of %d %s tasks have none); use --policy openai", missing, len(ts), ds)
	}
	return fmt.Errorf("--policy reference: %d of %d %s tasks have no reference solution", missing, len(ts), ds)
}

// RunSpec submits spec and follows it to completion; without --nats it
// first starts an embedded server and every service in-process.
func RunSpec(ctx context.Context, spec schemas.RunSpec, f *RunFlags, stderr io.Writer) (RunResult, error) {
	start := time.Now()
	if err := preflight(ctx, spec, f); err != nil {
		return RunResult{}, err
	}
	st, err := store.Open(ctx, f.Store, f.StoreOptions())
	if err != nil {
		return RunResult{}, err
	}
	if f.NATS == "" {
		// The in-process verifier writes here: check before submitting.
		if err := st.CheckWritable(ctx); err != nil {
			return RunResult{}, fmt.Errorf("%w (pass --store a directory or s3://bucket/prefix this process can write)", err)
		}
	}
	url := f.NATS
	logger := NewLogger(stderr, f.LogLevel)
	var wait func() error
	svcCtx, stopServices := context.WithCancel(ctx)
	defer stopServices()
	var connOpts []bus.ConnectOption
	if url == "" {
		unlock, err := lockState(f.State, "run")
		if err != nil {
			return RunResult{}, err
		}
		defer unlock()
		inProcess, stop, err := startEmbedded(f.State)
		if err != nil {
			return RunResult{}, err
		}
		defer stop()
		url, connOpts = bus.InProcessURL, append(connOpts, inProcess, bus.WithProvision(bus.ProvisionCreate))
	} else {
		auth, err := bus.AuthFromEnv(os.Getenv)
		if err != nil {
			return RunResult{}, err
		}
		connOpts = append(connOpts, bus.WithAuth(auth), bus.WithTLS(f.NATSTLS), bus.WithConnectTimeout(f.ConnectTimeout), bus.WithProvision(f.Provision), bus.WithRole("client"))
	}
	conn, err := bus.Connect(ctx, url, "medgym-cli", logger, connOpts...)
	if err != nil {
		return RunResult{}, err
	}
	defer conn.Close()
	if err := bus.PrepareStreams(ctx, conn, f.Streams); err != nil {
		return RunResult{}, err
	}
	svcErr := make(chan error, 1)
	var note func() string
	if f.NATS == "" {
		m := bus.NewMetrics()
		f.ServiceFlags.metrics, note = m, func() string { return modelNote(m) }
		w := StartServices(svcCtx, conn, &f.ServiceFlags, f.LLMURL, logger)
		done := make(chan error, 1)
		go func() {
			err := w()
			done <- err
			if err != nil {
				svcErr <- err
			}
		}()
		wait = func() error { return <-done }
	}
	if err := bus.SubmitRun(ctx, conn, spec); err != nil {
		return RunResult{}, err
	}
	fmt.Fprintf(stderr, "run %s submitted (%s, policy %s)\n", spec.RunID, strings.Join(spec.Datasets, ","), policyLabel(spec.Policy))
	status, _, err := follow(ctx, conn, spec.RunID, stderr, f.Quiet, svcErr, note)
	stopServices()
	if wait != nil {
		if werr := wait(); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return RunResult{}, err
	}
	if f.NATS != "" {
		// The rows are where the verifier wrote them, which the scores say.
		if st, err = verifierStore(ctx, conn, spec.RunID, st, f); err != nil {
			return RunResult{RunID: spec.RunID, Total: status.Total, Elapsed: time.Since(start)}, err
		}
	}
	res := RunResult{RunID: spec.RunID, Total: status.Total, Outcomes: map[schemas.Outcome]int{}, Store: st.String(), Elapsed: time.Since(start)}
	// Every row is stored (the scores say so); the store may still be
	// briefly unreachable, so reading back waits for it, within bounds.
	var rows []parquet.Row
	for wait := time.Second; ; wait = min(2*wait, 15*time.Second) {
		if rows, err = st.ReadRun(ctx, spec.RunID); err == nil {
			break
		}
		if time.Since(start) > 10*time.Minute+res.Elapsed || ctx.Err() != nil {
			return res, fmt.Errorf("read back run %s (every episode is stored; only the manifest is missing): %w", spec.RunID, err)
		}
		fmt.Fprintf(stderr, "store %s unreachable (%v); retrying in %s\n", st, err, wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	// The outcomes are the stored rows' (the scores stream may also carry
	// messages no verifier sent).
	for _, r := range rows {
		res.Outcomes[schemas.Outcome(r.Outcome)]++
	}
	if status.Cancelled {
		if err := writeCancelledManifest(ctx, st, status, rows); err != nil {
			return res, err
		}
		return res, fmt.Errorf("run %s was cancelled (%s): %d of %d episodes stored", spec.RunID, status.Cancel, len(rows), status.Total)
	}
	if len(rows) != res.Total {
		return res, fmt.Errorf("run %s: store %s holds %d of %d episodes", spec.RunID, st, len(rows), res.Total)
	}
	m, err := store.NewManifest(spec.RunID, rows, spec)
	if err != nil {
		return res, err
	}
	if err := st.WriteManifest(ctx, spec.RunID, m); err != nil {
		return res, fmt.Errorf("write manifest: %w", err)
	}
	return res, nil
}

// verifierStore returns the store the run's rows were written to, learnt
// from its scores (schemas.Score.Store): that store when --store was left
// at its default, st when --store names the same one, and an error naming
// both when they differ. Scores from verifiers older than contract 1.2
// carry no store: st is used.
func verifierStore(ctx context.Context, conn *bus.Conn, runID string, st *store.Store, f *RunFlags) (*store.Store, error) {
	follow, err := bus.Follow[schemas.Score](ctx, conn, schemas.StreamScores, schemas.EpisodeScored.For(runID))
	if err != nil {
		return nil, fmt.Errorf("read the scores of run %s: %w", runID, err)
	}
	seen := map[string]bool{}
	var locs []string
	for m, err := range follow.Available() {
		if err != nil {
			return nil, fmt.Errorf("read the scores of run %s: %w", runID, err)
		}
		if sc := m.Value; sc.Store != "" && !seen[sc.Store] {
			seen[sc.Store] = true
			locs = append(locs, sc.Store)
		}
	}
	switch {
	case len(locs) == 0:
		return st, nil
	case len(locs) > 1:
		sort.Strings(locs)
		return nil, fmt.Errorf("run %s: verifiers wrote its episodes to %d stores (%s); each holds part of the run",
			runID, len(locs), strings.Join(locs, ", "))
	case locs[0] == st.Location():
		return st, nil
	case f.Explicit["store"]:
		return nil, fmt.Errorf("run %s: the verifier wrote its episodes to %s, not to --store %s", runID, locs[0], st.Location())
	}
	vs, err := store.Open(ctx, locs[0], f.StoreOptions())
	if err != nil {
		return nil, fmt.Errorf("run %s: open the verifier's store: %w", runID, err)
	}
	return vs, nil
}

// checkSize refuses a run of more than maxEpisodes episodes (tasks ×
// samples), as the dispatcher does.
func checkSize(spec schemas.RunSpec, tasks, maxEpisodes int) error {
	if maxEpisodes < 1 {
		return fmt.Errorf("--max-episodes must be ≥ 1, got %d", maxEpisodes)
	}
	if tasks > 0 && spec.Samples > maxEpisodes/tasks {
		return fmt.Errorf("run %s: %d tasks × %d samples is more than the limit of %d episodes per run "+
			"(lower --samples or --limit, or raise --max-episodes here and on the dispatcher)", spec.RunID, tasks, spec.Samples, maxEpisodes)
	}
	return nil
}

func policyLabel(p schemas.PolicySpec) string {
	if p.Name == schemas.PolicyReference {
		return "reference (reference solutions, no model)"
	}
	return p.Name + " " + p.Model
}

// Follow watches the run's status and scores (bus.FollowRun) until the
// dispatcher records the run finished (every planned episode scored, or
// the run cancelled), printing a progress line. It returns the final
// status and the count of scored episodes per outcome. It rides out a
// NATS outage; an error on svcErr (the in-process services failing) ends
// it.
func Follow(ctx context.Context, conn *bus.Conn, runID string, w io.Writer, quiet bool, svcErr <-chan error) (schemas.RunStatus, map[schemas.Outcome]int, error) {
	return follow(ctx, conn, runID, w, quiet, svcErr, nil)
}

// follow is Follow; note, when set, adds to each progress line (the
// in-process model endpoint's state).
func follow(ctx context.Context, conn *bus.Conn, runID string, w io.Writer, quiet bool, svcErr <-chan error, note func() string) (schemas.RunStatus, map[schemas.Outcome]int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case err := <-svcErr:
			cancel(err)
		case <-ctx.Done():
		}
	}()
	outcomes := map[schemas.Outcome]int{}
	start := time.Now()
	tty := isTerminal(w)
	var lastLine time.Time
	var st schemas.RunStatus
	for p, err := range bus.FollowRun(ctx, conn, runID, 250*time.Millisecond) {
		st = p.Status
		if err != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
				return st, nil, cause // a service failed
			}
			if ctx.Err() != nil {
				return st, nil, fmt.Errorf("run %s interrupted at %d/%d episodes (resubmit with --run-id %s to continue, or medgym cancel %s): %w",
					runID, st.Done, st.Total, runID, runID, ctx.Err())
			}
			return st, nil, err
		}
		for _, sc := range p.Scores {
			outcomes[sc.Outcome]++
		}
		done := min(p.Scored, st.Total)
		if st.Finished {
			done = st.Done
		}
		if !quiet && st.Total > 0 && (tty || time.Since(lastLine) >= 10*time.Second || st.Finished) {
			extra := ""
			if note != nil {
				extra = note()
			}
			progress(w, st, done, outcomes, time.Since(start), tty, extra)
			lastLine = time.Now()
		}
	}
	if !quiet && tty {
		fmt.Fprintln(w)
	}
	return st, outcomes, nil
}

// isTerminal reports whether w is a terminal (progress redraws one line
// there; elsewhere, such as CI logs, it prints a line every 10 s).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Progress prints the run's progress line (rewritten in place on a
// terminal).
func Progress(w io.Writer, st schemas.RunStatus, done int, outcomes map[schemas.Outcome]int, el time.Duration, tty bool) {
	progress(w, st, done, outcomes, el, tty, "")
}

// progress is Progress with note added to the line.
func progress(w io.Writer, st schemas.RunStatus, done int, outcomes map[schemas.Outcome]int, el time.Duration, tty bool, note string) {
	infra := outcomes[schemas.OutcomeInfraFailure]
	perMin := float64(done) / el.Minutes()
	eta := "?"
	if done > 0 {
		eta = (time.Duration(float64(el) / float64(done) * float64(st.Total-done))).Round(time.Second).String()
	}
	lead, end := "\r", "   "
	if !tty {
		lead, end = "", "\n"
	}
	fmt.Fprintf(w, "%s%d/%d done, %d in flight, success %s, %.1f episodes/min, ETA %s%s%s",
		lead, done, st.Total, max(0, st.Published-done), scoredRate(Solved(outcomes), done-infra, infra), perMin, eta, note, end)
}

// modelNote is the progress line's word on the in-process llm-worker's
// model endpoints (its medgym_llm_endpoint_down and
// medgym_llm_calls_waiting metrics): ", model endpoint down (N calls
// waiting)" while one is down, else nothing.
func modelNote(m *bus.Metrics) string {
	mfs, err := m.Registry.Gather()
	if err != nil {
		return ""
	}
	down, waiting := false, 0.0
	for _, mf := range mfs {
		for _, x := range mf.GetMetric() {
			switch mf.GetName() {
			case "medgym_llm_endpoint_down":
				down = down || x.GetGauge().GetValue() == 1
			case "medgym_llm_calls_waiting":
				waiting += x.GetGauge().GetValue()
			}
		}
	}
	if !down {
		return ""
	}
	return fmt.Sprintf(", model endpoint down (%d calls waiting for it)", int(waiting))
}
