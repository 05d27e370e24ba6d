package policy

import (
	"context"
	"fmt"
	"strings"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/llm-worker/internal/llm"
)

// DebuggerConfig says which model answers the debug action. Empty fields
// default to the episode's own policy: its base URL (or the pool's
// default), its model and its API key variable.
type DebuggerConfig struct {
	BaseURL   string
	Model     string
	APIKeyEnv string
	// MaxTokens per debugger call; 0 means upstream's 2048.
	MaxTokens int
	// Off disables the debug action (the model is told it is unavailable).
	Off bool
}

// Debugger serves upstream's debug action with two calls to a debugger
// model, as upstream does: the first summarises the results of the
// episode's earlier request_info actions (made even when there are none),
// the second explains the error and proposes a fix given the task goal,
// that summary, and the code and error message the agent passed. Sampling
// is upstream's: temperature 0, at most 2048 new tokens. The debugger's
// token counts are not recorded.
type Debugger struct {
	Config DebuggerConfig
	// Pool provides (and shares) the OpenAI-compatible clients.
	Pool *OpenAIPool
}

// Debug implements episode.Debugger.
func (d Debugger) Debug(ctx context.Context, req schemas.EpisodeRequest, turns []schemas.Turn, code, errMsg string) (string, error) {
	cfg := d.Config
	base, model, keyEnv := cfg.BaseURL, cfg.Model, cfg.APIKeyEnv
	if base == "" {
		base = req.Policy.BaseURL
	}
	if model == "" && req.Policy.Name == schemas.PolicyOpenAI {
		model = req.Policy.Model
	}
	if keyEnv == "" {
		keyEnv = req.Policy.APIKeyEnv
	}
	if model == "" {
		return "", fmt.Errorf("debugger: no model (set --debugger-model)")
	}
	c, err := d.Pool.client(base, model, keyEnv, false)
	if err != nil {
		return "", fmt.Errorf("debugger: %w", err)
	}
	maxTokens := cfg.MaxTokens
	if maxTokens <= 0 {
		maxTokens = 2048
	}
	zero := 0.0
	ask := func(prompt string) (string, error) {
		comp, err := c.Complete(ctx, llm.Request{
			Messages:    []schemas.ChatMessage{{Role: "user", Content: prompt}},
			Temperature: &zero, MaxTokens: maxTokens, User: req.EpisodeID + "/debug",
		})
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(comp.Text), nil
	}
	summary, err := ask(SummaryPrompt(RequestedInfo(turns)))
	if err != nil {
		return "", fmt.Errorf("debugger summary: %w", err)
	}
	out, err := ask(DebugPrompt(goal(req.Task), summary, code, errMsg))
	if err != nil {
		return "", fmt.Errorf("debugger: %w", err)
	}
	return out, nil
}

// RequestedInfo lists the observations of the request_info actions among
// turns, in order.
func RequestedInfo(turns []schemas.Turn) []string {
	var out []string
	for _, t := range turns {
		if t.ParseError == "" && t.ActionName == schemas.ActionRequestInfo && t.Observation != "" {
			out = append(out, t.Observation)
		}
	}
	return out
}

// SummaryPrompt is the debugger's first call (after upstream's).
func SummaryPrompt(info []string) string {
	body := strings.Join(info, "\n\n")
	if body == "" {
		body = "(no information was requested)"
	}
	return "You are a bioinformatics expert. Please summarize the following requested information, " +
		"keeping every table name, column name, value and file path it mentions.\n\n" + body
}

// DebugPrompt is the debugger's second call (after upstream's).
func DebugPrompt(goal, summary, code, errMsg string) string {
	var b strings.Builder
	b.WriteString("You are a Python debugging expert. A program written to solve the task below failed.\n")
	b.WriteString("Explain what caused the error and propose a fix (with the corrected code).\n\n")
	fmt.Fprintf(&b, "Task goal:\n%s\n\n", goal)
	fmt.Fprintf(&b, "Known information about the data:\n%s\n\n", summary)
	fmt.Fprintf(&b, "Code:\n%s\n\n", code)
	fmt.Fprintf(&b, "Error message:\n%s\n", errMsg)
	return b.String()
}

func goal(t schemas.TaskView) string {
	if t.Context == "" {
		return t.Question
	}
	return t.Question + "\n\n" + t.Context
}
