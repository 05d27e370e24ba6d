package llm

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/medgym/medgym/schemas"
)

// chatRequest is the JSON body of POST /chat/completions. vLLM's extras are
// plain top-level keys.
type chatRequest struct {
	Model               string                `json:"model"`
	Messages            []schemas.ChatMessage `json:"messages"`
	Stream              bool                  `json:"stream"`
	Temperature         *float64              `json:"temperature,omitempty"`
	TopP                *float64              `json:"top_p,omitempty"`
	MaxTokens           int                   `json:"max_tokens,omitempty"`
	MaxCompletionTokens int                   `json:"max_completion_tokens,omitempty"`
	Seed                *int64                `json:"seed,omitempty"`
	Stop                []string              `json:"stop,omitempty"`
	User                string                `json:"user,omitempty"`

	Logprobs               bool `json:"logprobs,omitempty"`
	TopLogprobs            *int `json:"top_logprobs,omitempty"`
	ReturnTokenIDs         bool `json:"return_token_ids,omitempty"`
	ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids,omitempty"`
}

func (c *Client) wireRequest(req Request) chatRequest {
	w := chatRequest{
		Model:    c.cfg.Model,
		Messages: req.Messages,
		Seed:     req.Seed,
		Stop:     req.Stop,
		User:     req.User,
	}
	if !c.cfg.NoTemperature {
		w.Temperature, w.TopP = req.Temperature, req.TopP
	}
	if c.cfg.UseMaxCompletionTokens {
		w.MaxCompletionTokens = req.MaxTokens
	} else {
		w.MaxTokens = req.MaxTokens
	}
	if c.cfg.RequestTokenIDs {
		zero := 0
		w.Logprobs, w.TopLogprobs, w.ReturnTokenIDs, w.ReturnTokensAsTokenIDs = true, &zero, true, true
	}
	return w
}

// chatResponse is the part of a chat.completion this client reads.
type chatResponse struct {
	Choices []struct {
		Message *struct {
			Content          *string `json:"content"`
			Refusal          *string `json:"refusal"`
			Reasoning        *string `json:"reasoning"`
			ReasoningContent *string `json:"reasoning_content"`
		} `json:"message"`
		FinishReason string  `json:"finish_reason"`
		TokenIDs     []int32 `json:"token_ids"`
		Logprobs     *struct {
			Content []struct {
				Token   string  `json:"token"`
				Logprob float64 `json:"logprob"`
			} `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
	Usage          *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// permanentError marks a well-formed response no retry can fix.
type permanentError struct{ msg string }

func (e permanentError) Error() string { return e.msg }

// decodeCompletion reads the first choice of a 200 body. Unreadable JSON is
// an ordinary (retryable) error; a valid body without a usable choice is a
// permanentError.
func decodeCompletion(data []byte) (Completion, error) {
	var r chatResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return Completion{}, fmt.Errorf("decode response: %w (body starts %q)", err, head(data))
	}
	if len(r.Choices) == 0 || r.Choices[0].Message == nil {
		return Completion{}, permanentError{"response has no choices: " + errorMessage(data)}
	}
	ch := r.Choices[0]
	comp := Completion{FinishReason: ch.FinishReason, PromptTokenIDs: r.PromptTokenIDs}
	if m := ch.Message; m.Content != nil {
		comp.Text = *m.Content
	} else if m.Refusal != nil {
		comp.Text = *m.Refusal
	}
	switch m := ch.Message; {
	case m.Reasoning != nil:
		comp.Reasoning = *m.Reasoning
	case m.ReasoningContent != nil:
		comp.Reasoning = *m.ReasoningContent
	}
	if r.Usage != nil {
		comp.PromptTokens, comp.CompletionTokens = r.Usage.PromptTokens, r.Usage.CompletionTokens
	}
	if ch.Logprobs != nil && len(ch.Logprobs.Content) > 0 {
		comp.Logprobs = make([]float32, len(ch.Logprobs.Content))
		ids := make([]int32, 0, len(ch.Logprobs.Content))
		for i, lp := range ch.Logprobs.Content {
			comp.Logprobs[i] = float32(lp.Logprob)
			if s, ok := strings.CutPrefix(lp.Token, "token_id:"); ok {
				if id, err := strconv.ParseInt(s, 10, 32); err == nil {
					ids = append(ids, int32(id))
				}
			}
		}
		if len(ids) == len(ch.Logprobs.Content) {
			comp.TokenIDs = ids
		}
	}
	if ch.TokenIDs != nil {
		comp.TokenIDs = ch.TokenIDs
	}
	return comp, nil
}

// errorMessage extracts the message of an error body: OpenAI and new vLLM
// nest it ({"error": {"message", "type", "code"}}), old vLLM is flat
// ({"object": "error", "message", ...}); anything else is quoted.
func errorMessage(data []byte) string {
	var nested struct {
		Error json.RawMessage `json:"error"`
	}
	var e apiErrorBody
	if json.Unmarshal(data, &nested) == nil && len(nested.Error) > 0 {
		var s string
		if json.Unmarshal(nested.Error, &s) == nil && s != "" {
			return s
		}
		if json.Unmarshal(nested.Error, &e) == nil && e.Message != "" {
			return e.String()
		}
	}
	if json.Unmarshal(data, &e) == nil && e.Message != "" {
		return e.String()
	}
	if len(data) == 0 {
		return "empty body"
	}
	return strconv.Quote(head(data))
}

type apiErrorBody struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

func (e apiErrorBody) String() string {
	var extra []string
	if e.Type != "" {
		extra = append(extra, "type "+e.Type)
	}
	if c := strings.Trim(string(e.Code), `"`); c != "" && c != "null" {
		extra = append(extra, "code "+c)
	}
	if len(extra) == 0 {
		return e.Message
	}
	return e.Message + " (" + strings.Join(extra, ", ") + ")"
}

func head(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
