package policy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/medgym/medgym/agent/episode"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/llm-worker/internal/llm"
)

// ClientDefaults are applied to every OpenAI-compatible client the worker
// creates (one per base URL and model).
type ClientDefaults struct {
	Timeout       time.Duration
	MaxConcurrent int
	// MaxRetries bounds the retries of a failing request after the first
	// attempt: 0 means none.
	MaxRetries             int
	MaxRetryWait           time.Duration
	NoTemperature          bool
	UseMaxCompletionTokens bool
	RequestTokenIDs        bool
	// WaitOutage makes calls wait out an endpoint that is down until their
	// context ends (llm.Config.WaitOutage).
	WaitOutage bool
	// Logger receives the clients' retry notices and endpoint down/up
	// lines; nil discards them.
	Logger *slog.Logger
	// DefaultBaseURL is used when a PolicySpec has none.
	DefaultBaseURL string
	// CAFile, when set, is a PEM file of CA certificates trusted for
	// https:// endpoints besides the system's (a private CA).
	CAFile string
	// Getenv reads API keys (named by PolicySpec.APIKeyEnv, default
	// OPENAI_API_KEY, or a file named by that name + "_FILE"; see
	// schemas.Secret); nil means os.Getenv.
	Getenv func(string) string
}

// OpenAIPool hands out one client per (base URL, model, key variable).
type OpenAIPool struct {
	Defaults ClientDefaults

	mu      sync.Mutex
	clients map[string]*llm.Client
}

// Policy returns the policy for spec.
func (p *OpenAIPool) Policy(spec schemas.PolicySpec) (episode.Policy, error) {
	c, err := p.client(spec.BaseURL, spec.Model, spec.APIKeyEnv, spec.Logprobs)
	if err != nil {
		return nil, fmt.Errorf("policy openai: %w", err)
	}
	return OpenAI{c}, nil
}

// client returns the shared client for (base URL, model, key variable,
// token ids); an empty base is the pool's default, an empty key variable
// OPENAI_API_KEY. Whether token ids are requested is part of the key, so a
// run with logprobs never reuses a client made for a run without.
func (p *OpenAIPool) client(base, model, keyEnv string, tokenIDs bool) (*llm.Client, error) {
	// The bus carries base URLs without credentials (schemas.StripUserinfo);
	// the worker's own --llm-url may hold them for its endpoint.
	if d := p.Defaults.DefaultBaseURL; base == "" || (d != "" && base == schemas.StripUserinfo(d)) {
		base = d
	}
	if base == "" {
		return nil, fmt.Errorf("no base URL (set --llm-url)")
	}
	if keyEnv == "" {
		keyEnv = "OPENAI_API_KEY"
	}
	d := p.Defaults
	tokenIDs = tokenIDs || d.RequestTokenIDs
	key := fmt.Sprintf("%s\x00%s\x00%s\x00%t", base, model, keyEnv, tokenIDs)
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[key]; ok {
		return c, nil
	}
	getenv := d.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	apiKey, err := schemas.Secret(getenv, keyEnv)
	if err != nil {
		return nil, err
	}
	retries := d.MaxRetries
	if retries == 0 {
		retries = -1 // llm.Config reads 0 as its default
	}
	hc, err := HTTPClient(d.CAFile)
	if err != nil {
		return nil, err
	}
	c, err := llm.New(llm.Config{HTTPClient: hc,
		BaseURL: base, Model: model, APIKey: apiKey,
		Timeout: d.Timeout, MaxConcurrent: d.MaxConcurrent, MaxRetries: retries, MaxRetryWait: d.MaxRetryWait,
		NoTemperature: d.NoTemperature, UseMaxCompletionTokens: d.UseMaxCompletionTokens,
		RequestTokenIDs: tokenIDs, WaitOutage: d.WaitOutage, Logger: d.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("%s at %s: %w", model, schemas.RedactURL(base), err)
	}
	if p.clients == nil {
		p.clients = map[string]*llm.Client{}
	}
	p.clients[key] = c
	return c, nil
}

// EndpointHealth is the state of one client's endpoint.
type EndpointHealth struct {
	BaseURL, Model string // the URL redacted
	llm.Health
}

// Health reports every client's endpoint, in no particular order.
func (p *OpenAIPool) Health() []EndpointHealth {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]EndpointHealth, 0, len(p.clients))
	for _, c := range p.clients {
		base, model := c.Endpoint()
		out = append(out, EndpointHealth{BaseURL: schemas.RedactURL(base), Model: model, Health: c.Health()})
	}
	return out
}

// OpenAI is a policy backed by an OpenAI-compatible endpoint.
type OpenAI struct{ c *llm.Client }

// Complete implements episode.Policy.
func (o OpenAI) Complete(ctx context.Context, req schemas.EpisodeRequest, msgs []schemas.ChatMessage) (episode.Completion, error) {
	p := req.Policy
	c, err := o.c.Complete(ctx, llm.Request{
		Messages: msgs, Temperature: p.Temperature, TopP: p.TopP, MaxTokens: p.MaxTokens,
		Seed: p.Seed, Stop: p.Stop, User: req.EpisodeID,
	})
	switch {
	case errors.Is(err, llm.ErrContextOverflow):
		return episode.Completion{}, fmt.Errorf("%w: %w", episode.ErrContextOverflow, err)
	case errors.Is(err, llm.ErrUnavailable):
		return episode.Completion{}, fmt.Errorf("%w: %w", episode.ErrUnavailable, err)
	case err != nil:
		return episode.Completion{}, err
	}
	return episode.Completion{
		Text: c.Text, Reasoning: c.Reasoning, FinishReason: c.FinishReason,
		PromptTokens: c.PromptTokens, CompletionTokens: c.CompletionTokens,
		PromptTokenIDs: c.PromptTokenIDs, TokenIDs: c.TokenIDs, Logprobs: c.Logprobs, Latency: c.Latency,
	}, nil
}

// HTTPClient trusts the system's CAs plus those in caFile; nil (the
// client's default) when caFile is empty.
func HTTPClient(caFile string) (*http.Client, error) {
	if caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("model endpoint CA: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("model endpoint CA %s: no PEM certificate in it", caFile)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: t}, nil
}
