// Package apitest checks HTTP exchanges with the environment API against
// its OpenAPI document (the one the server embeds and serves), for tests
// here and in the system tests: a Checker is an http.RoundTripper that
// validates every response it carries and keeps every response body, so a
// test can also search all of them (for a canary, say).
//
// The validator is pb33f/libopenapi-validator: it validates OpenAPI 3.1
// documents with JSON Schema 2020-12 (kin-openapi's 3.1 support is
// partial), and it checks responses against the operation's declared
// status codes, content types and schemas.
package apitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"

	"github.com/medgym/medgym/services/env/internal/httpapi"
)

// Exchange is one request and its response body.
type Exchange struct {
	Method, Path string
	Status       int
	Body         []byte
}

// Checker validates responses against the API's document.
type Checker struct {
	Base http.RoundTripper
	v    validator.Validator

	mu        sync.Mutex
	exchanges []Exchange
	failures  []string
}

// New returns a Checker over base (http.DefaultTransport when nil); the
// document itself must be a valid OpenAPI document.
func New(base http.RoundTripper) (*Checker, error) {
	if base == nil {
		base = http.DefaultTransport
	}
	doc, err := libopenapi.NewDocument(httpapi.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, fmt.Errorf("openapi.json: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		var msgs []string
		for _, e := range verrs {
			msgs = append(msgs, e.Message+": "+e.Reason)
		}
		return nil, fmt.Errorf("openapi.json is not a valid OpenAPI document: %s", strings.Join(msgs, "; "))
	}
	return &Checker{Base: base, v: v}, nil
}

// RoundTrip carries the request, reads the response body, validates the
// response and hands it on with its body intact.
func (c *Checker) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.Base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	c.Check(req, resp, body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// Check validates one response (its body given apart) and records it.
func (c *Checker) Check(req *http.Request, resp *http.Response, body []byte) {
	var fail string
	if resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusGatewayTimeout {
		fail = fmt.Sprintf("%s %s: status %d (a server fault): %s", req.Method, req.URL.Path, resp.StatusCode, body)
	}
	// The request body is not re-read: only the response is validated.
	vreq := req.Clone(req.Context())
	vreq.Body = http.NoBody
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if ok, errs := c.v.ValidateHttpResponse(vreq, resp); !ok && undocumented(errs) {
		// A path or method the document does not have: the answer must
		// still be the API's error body, with 401, 404 or 405.
		if !isErrorBody(body) || (resp.StatusCode != 401 && resp.StatusCode != 404 && resp.StatusCode != 405) {
			fail = strings.TrimSpace(fail + fmt.Sprintf(" %s %s (not in the document) → %d %.300s: want 401, 404 or 405 with an error body",
				req.Method, req.URL.Path, resp.StatusCode, body))
		}
	} else if !ok {
		var msgs []string
		for _, e := range errs {
			m := e.Message + ": " + e.Reason
			for _, se := range e.SchemaValidationErrors {
				m += " [" + se.FieldPath + ": " + se.Reason + "]"
			}
			msgs = append(msgs, m)
		}
		fail = strings.TrimSpace(fail + fmt.Sprintf(" %s %s → %d does not match openapi.json: %s (body %.300s)",
			req.Method, req.URL.Path, resp.StatusCode, strings.Join(msgs, "; "), body))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exchanges = append(c.exchanges, Exchange{Method: req.Method, Path: req.URL.Path, Status: resp.StatusCode, Body: body})
	if fail != "" {
		c.failures = append(c.failures, fail)
	}
}

func undocumented(errs []*verrors.ValidationError) bool {
	for _, e := range errs {
		if !e.IsPathMissingError() && !e.IsOperationMissingError() {
			return false
		}
	}
	return len(errs) > 0
}

func isErrorBody(b []byte) bool {
	var e struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	return json.Unmarshal(b, &e) == nil && e.Error != nil && e.Error.Code != "" && e.Error.Message != ""
}

// Failures are the responses that did not match the document (or were a
// 5xx fault), in order.
func (c *Checker) Failures() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.failures...)
}

// Exchanges are every response seen, in order.
func (c *Checker) Exchanges() []Exchange {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Exchange(nil), c.exchanges...)
}
