package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/tasks"
)

// cmdFakeLLM serves the fake OpenAI-compatible model (a test tool).
func cmdFakeLLM(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fake-llm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8089", "listen address")
	pol := fs.String("policy", "reference", "script, reference, garbage, mixed or alternate (see the fakellm package)")
	pCorrect := fs.Float64("p-correct", 0.8, "reference policy: probability of answering with the reference solution")
	latency := fs.Duration("latency", 0, "mean latency per request")
	jitter := fs.Duration("jitter", 0, "latency jitter")
	e429 := fs.Float64("rate-429", 0, "share of requests answered 429")
	e500 := fs.Float64("rate-500", 0, "share of requests answered 500")
	tmo := fs.Float64("rate-timeout", 0, "share of requests that hang until the client gives up")
	bad := fs.Float64("rate-malformed", 0, "share of responses whose JSON body is broken")
	garbage := fs.Float64("rate-garbage", 0, "reference policy: share of replies that are not an action")
	seed := fs.Int64("seed", 1, "seed")
	model := fs.String("model", "medgym-fake", "model name served (LoRA adapters loaded at run time are served too)")
	data := fs.String("data", tasks.DataRoot(), "shared data root (for reference solutions)")
	library := fs.String("library", tasks.LibraryDir(), "generated task library, for the reference solutions of the generated datasets (env MEDGYM_LIBRARY)")
	datasets := fs.String("dataset", "medcalcbench", "datasets whose reference solutions the reference policy knows, comma separated (every built-in one: medcalcbench needs only --data, the others the generated --library)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	refs, err := referenceIndex(ctx, *data, *library, splitList(*datasets))
	if err != nil {
		return err
	}
	srv := fakellm.New(fakellm.Config{
		Policy: *pol, PCorrect: *pCorrect, LatencyMean: *latency, LatencyJitter: *jitter,
		ErrorRate429: *e429, ErrorRate500: *e500, TimeoutRate: *tmo, MalformedRate: *bad, GarbageRate: *garbage, Seed: *seed, Model: *model,
		References: refs,
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("fake-llm listen %s: %w", *addr, err)
	}
	fmt.Fprintf(stdout, "fake-llm (a test tool, not a model) serving http://%s/v1 policy=%s\n", ln.Addr(), *pol)
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ReferenceIndex lets the fake model find a task's reference solution from
// the goal text it is sent (the first user message contains the question).
func ReferenceIndex(ctx context.Context, data string, datasets []string) (func(goal string) (string, bool), error) {
	return referenceIndex(ctx, data, "", datasets)
}

// referenceIndex is ReferenceIndex over the generated library too.
func referenceIndex(ctx context.Context, data, library string, datasets []string) (func(goal string) (string, bool), error) {
	var all []tasks.Task
	for _, ds := range datasets {
		for _, sp := range []string{"test", "train"} {
			ts, err := tasks.Load(ctx, tasks.Source{Dataset: ds, Split: sp, DataRoot: data, LibraryDir: library})
			if err != nil {
				return nil, err
			}
			all = append(all, ts...)
		}
	}
	return fakellm.References(all), nil
}
