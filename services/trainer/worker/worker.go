package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Ready is the worker's first line.
type Ready struct {
	Ready             bool    `json:"ready"`
	Backend           string  `json:"backend"`
	Model             string  `json:"model"`
	Init              string  `json:"init"`
	OptimizerRestored bool    `json:"optimizer_restored"`
	LoadS             float64 `json:"load_s"`
	// World is the number of data-parallel ranks (torchrun).
	World int `json:"world"`
	// ServePort is the port of the worker's policy server (--serve-port),
	// 0 when it serves nothing; ServeName the name its initial weights are
	// served as.
	ServePort int    `json:"serve_port"`
	ServeName string `json:"serve_name"`
}

// Recipe overrides the step's per-mode defaults; nil fields keep them.
type Recipe struct {
	LR         *float64 `json:"lr,omitempty"`
	Beta       *float64 `json:"beta,omitempty"`
	KLCoef     *float64 `json:"kl_coef,omitempty"`
	ClipEps    *float64 `json:"clip_eps,omitempty"`
	Steps      *int     `json:"steps,omitempty"`
	Agg        string   `json:"agg,omitempty"`
	MaxLen     *int     `json:"max_len,omitempty"`
	MicroBatch *int     `json:"micro_batch,omitempty"`
}

// TrainRequest asks for training steps on a JSONL batch; the adapter and
// optimiser state are saved to Out.
type TrainRequest struct {
	Mode     string `json:"mode"`
	Data     string `json:"data"`
	Out      string `json:"out"`
	Recipe   Recipe `json:"recipe"`
	Evaluate bool   `json:"evaluate"`
	// ServeAs, for a worker that serves (--serve-port), publishes the
	// trained weights under this name.
	ServeAs string `json:"serve_as,omitempty"`
}

// TrainResult is the worker's answer to a TrainRequest.
type TrainResult struct {
	Metrics map[string]any `json:"metrics"`
	TrainS  float64        `json:"train_s"`
	SaveS   float64        `json:"save_s"`
}

// ErrCrashed reports that the worker process is gone.
var ErrCrashed = errors.New("trainer worker crashed")

// RejectedError is a request the worker answered with an error; the worker
// is still running and its model unchanged.
type RejectedError struct{ Msg string }

func (e *RejectedError) Error() string { return "trainer worker rejected the request: " + e.Msg }

// Process is one running worker.
type Process struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	tail  *tailBuffer
	done  chan struct{}
	mu    sync.Mutex
	next  int
	Ready Ready
}

// Start runs command with "--init=<init>" (when init is set) and extra
// appended, and waits for its ready line.
func Start(ctx context.Context, command []string, dir, init string, extra ...string) (*Process, error) {
	if len(command) == 0 {
		return nil, errors.New("trainer worker: empty command")
	}
	args := append([]string(nil), command[1:]...)
	if init != "" {
		args = append(args, "--init="+init)
	}
	args = append(args, extra...)
	cmd := exec.Command(command[0], args...)
	cmd.Dir = dir
	// Its own process group: Kill ends a launcher's children too (torchrun's
	// ranks, which also die with their launcher: worker.py). A child that
	// outlives the process cannot hold Wait on the pipes for long.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	p := &Process{cmd: cmd, tail: &tailBuffer{max: 4000}, done: make(chan struct{})}
	cmd.Stderr = p.tail
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("trainer worker: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("trainer worker: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("trainer worker %s: %w", command[0], err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	p.out = bufio.NewScanner(stdout)
	p.out.Buffer(make([]byte, 1<<20), 64<<20)
	line, err := p.readLine(ctx)
	if err != nil {
		p.Kill()
		return nil, fmt.Errorf("trainer worker start: %w", err)
	}
	if err := json.Unmarshal(line, &p.Ready); err != nil || !p.Ready.Ready {
		p.Kill()
		return nil, fmt.Errorf("trainer worker start: not a ready line: %.200s", line)
	}
	return p, nil
}

// readLine reads one stdout line, or fails when ctx ends (the process is
// then killed: a half-read protocol cannot be resumed) or the process
// exits.
func (p *Process) readLine(ctx context.Context) ([]byte, error) {
	type res struct {
		b  []byte
		ok bool
	}
	ch := make(chan res, 1)
	go func() {
		ok := p.out.Scan()
		ch <- res{append([]byte(nil), p.out.Bytes()...), ok}
	}()
	select {
	case r := <-ch:
		if !r.ok {
			<-p.done
			return nil, fmt.Errorf("%w (%s): %s", ErrCrashed, p.cmd.ProcessState, p.tail.String())
		}
		return r.b, nil
	case <-ctx.Done():
		p.Kill()
		return nil, ctx.Err()
	}
}

// call sends one request and reads its answer.
func (p *Process) call(ctx context.Context, req map[string]any, out any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	req["id"] = p.next
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("trainer worker request: %w", err)
	}
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		<-p.done
		return fmt.Errorf("%w: %v: %s", ErrCrashed, err, p.tail.String())
	}
	line, err := p.readLine(ctx)
	if err != nil {
		return err
	}
	var head struct {
		ID    int    `json:"id"`
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(line, &head); err != nil {
		return fmt.Errorf("trainer worker answer: %w: %.200s", err, line)
	}
	if head.ID != p.next {
		return fmt.Errorf("trainer worker answered request %d, want %d", head.ID, p.next)
	}
	if !head.OK {
		return &RejectedError{head.Error}
	}
	if out != nil {
		if err := json.Unmarshal(line, out); err != nil {
			return fmt.Errorf("trainer worker answer: %w", err)
		}
	}
	return nil
}

// Train runs one TrainRequest.
func (p *Process) Train(ctx context.Context, r TrainRequest) (TrainResult, error) {
	var res TrainResult
	req := map[string]any{"op": "train", "mode": r.Mode, "data": r.Data, "out": r.Out, "recipe": r.Recipe,
		"evaluate": r.Evaluate}
	if r.ServeAs != "" {
		req["serve_as"] = r.ServeAs
	}
	err := p.call(ctx, req, &res)
	return res, err
}

// ScoreResult is the worker's answer to a score request.
type ScoreResult struct {
	Scored   int     `json:"scored"`
	Unscored int     `json:"unscored"`
	ScoreS   float64 `json:"score_s"`
}

// Score has the worker's model score each record of data (a rendered
// trajectory, trainer build's verifier/ layout) as a trajectory verifier,
// P(YES) over YES/NO, written as JSONL to out.
func (p *Process) Score(ctx context.Context, data, out string, maxLen int) (ScoreResult, error) {
	var res ScoreResult
	req := map[string]any{"op": "score", "data": data, "out": out}
	if maxLen > 0 {
		req["max_len"] = maxLen
	}
	err := p.call(ctx, req, &res)
	return res, err
}

// Ping checks that the worker answers.
func (p *Process) Ping(ctx context.Context) error {
	return p.call(ctx, map[string]any{"op": "ping"}, nil)
}

// Send writes a raw line to the worker and returns its raw answer (tests
// use it to send malformed requests).
func (p *Process) Send(ctx context.Context, line string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		return "", fmt.Errorf("%w: %v", ErrCrashed, err)
	}
	b, err := p.readLine(ctx)
	return string(b), err
}

// Close asks the worker to exit and waits for it (killing it after 30 s).
func (p *Process) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := p.call(ctx, map[string]any{"op": "shutdown"}, nil)
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-ctx.Done():
		p.Kill()
	}
	return err
}

// Kill ends the process and its process group (a launcher's children) at
// once; closing stdin first also ends ranks that left the group.
func (p *Process) Kill() {
	_ = p.stdin.Close()
	if p.cmd.Process != nil && p.Alive() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Alive reports whether the process is still running.
func (p *Process) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Supervisor keeps one worker running: it starts it on first use from
// Init, and after a crash starts a new one from the last adapter saved
// (with its optimiser state) and retries the request once.
type Supervisor struct {
	Command []string
	Dir     string
	// Init is where the first worker starts from ("" for the base model);
	// after each successful step it is the adapter just saved.
	Init string
	// Serve, when set, makes the worker serve the model it trains
	// (worker.py --serve-port): every worker it starts listens on
	// Serve.Host:Serve.Port, the same address after a restart.
	Serve *Serve
	Log   *slog.Logger
	p     *Process
	// Restarts counts workers started after one was lost.
	Restarts int
	// LoadS is the time spent starting workers (model loads), in seconds.
	LoadS float64
}

// Serve is where a supervised worker serves its policy.
type Serve struct {
	Host string
	Port int
	// Name is what the worker's initial weights are served as: the base
	// model's name, then after each step with a ServeAs that name (so a
	// restarted worker serves its adapter under the name the samplers use).
	Name string
}

// URL is the server's OpenAI base URL (ending in /v1).
func (s *Serve) URL() string {
	return "http://" + net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) + "/v1"
}

func (s *Supervisor) start(ctx context.Context) error {
	t := time.Now()
	var extra []string
	if s.Serve != nil {
		extra = []string{"--serve-host=" + s.Serve.Host, "--serve-port=" + strconv.Itoa(s.Serve.Port),
			"--serve-name=" + s.Serve.Name}
	}
	p, err := Start(ctx, s.Command, s.Dir, s.Init, extra...)
	s.LoadS += time.Since(t).Seconds()
	if err != nil {
		return err
	}
	s.p = p
	if s.Log != nil {
		s.Log.Info("trainer worker ready", "pid", p.Pid(), "backend", p.Ready.Backend, "init", s.Init,
			"optimizer_restored", p.Ready.OptimizerRestored, "load_s", p.Ready.LoadS)
	}
	return nil
}

// Process returns the running worker, starting one if needed.
func (s *Supervisor) Process(ctx context.Context) (*Process, error) {
	if s.p == nil || !s.p.Alive() {
		if s.p != nil {
			s.Restarts++
			if s.Log != nil {
				s.Log.Warn("trainer worker gone; restarting from the last saved adapter", "init", s.Init)
			}
		}
		if err := s.start(ctx); err != nil {
			return nil, err
		}
	}
	return s.p, nil
}

// Train runs r on the worker; a crash restarts the worker from the last
// saved adapter and retries once. A rejected request is not retried.
func (s *Supervisor) Train(ctx context.Context, r TrainRequest) (TrainResult, error) {
	for attempt := 0; ; attempt++ {
		p, err := s.Process(ctx)
		if err != nil {
			return TrainResult{}, err
		}
		res, err := p.Train(ctx, r)
		if err == nil {
			s.Init = r.Out
			if s.Serve != nil && r.ServeAs != "" {
				s.Serve.Name = r.ServeAs
			}
			return res, nil
		}
		if !errors.Is(err, ErrCrashed) || attempt == 1 || ctx.Err() != nil {
			return res, err
		}
		if s.Log != nil {
			s.Log.Warn("trainer worker crashed", "err", err)
		}
	}
}

// Close stops the worker, if one runs.
func (s *Supervisor) Close() error {
	if s.p == nil || !s.p.Alive() {
		return nil
	}
	return s.p.Close()
}

// tailBuffer keeps the last max bytes written (the worker's stderr).
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if os.Getenv("MEDGYM_TEST_LOG") != "" {
		_, _ = os.Stderr.Write(b)
	}
	t.buf = append(t.buf, b...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
