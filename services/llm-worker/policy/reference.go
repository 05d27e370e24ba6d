package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/medgym/medgym/agent/episode"
	"github.com/medgym/medgym/schemas"
)

// ReferenceModel is the model name recorded for reference-policy episodes.
const ReferenceModel = "reference-solution"

// Solutions looks up a task's reference solution.
type Solutions interface {
	Reference(ctx context.Context, dataset, split, taskID string) (string, error)
}

// Reference plays the reference solution: first a validate_code action
// with the solution, then an explicit answer with the last line it printed
// (for runs that end only on an explicit answer).
type Reference struct{ Solutions Solutions }

// Complete implements episode.Policy.
func (r Reference) Complete(ctx context.Context, req schemas.EpisodeRequest, msgs []schemas.ChatMessage) (episode.Completion, error) {
	start := time.Now()
	assistant := 0
	for _, m := range msgs {
		if m.Role == "assistant" {
			assistant++
		}
	}
	var act any
	if assistant == 0 {
		code, err := r.Solutions.Reference(ctx, req.Task.Dataset, req.Task.Split, req.Task.ID)
		if err != nil {
			return episode.Completion{}, fmt.Errorf("reference solution of %s: %w", req.Task.ID, err)
		}
		act = map[string]any{"action": schemas.ActionValidateCode, "params": map[string]string{"code": code}}
	} else {
		last := ""
		if n := len(msgs); n > 0 && msgs[n-1].Role == "user" {
			lines := strings.Split(strings.TrimSpace(msgs[n-1].Content), "\n")
			last = strings.TrimSpace(lines[len(lines)-1])
		}
		act = map[string]any{"action": schemas.ActionAnswer, "params": map[string]string{"answer": last}}
	}
	b, err := json.Marshal(act)
	if err != nil {
		return episode.Completion{}, fmt.Errorf("reference action: %w", err)
	}
	return episode.Completion{Text: string(b), FinishReason: "stop", Latency: time.Since(start)}, nil
}
