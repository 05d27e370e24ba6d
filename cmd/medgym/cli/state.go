package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/embedded"
)

// stateLockFile is the lock of a state folder, inside it: the holder's
// process id and command, for the error a second process gets.
const stateLockFile = "lock"

// lockState takes the state folder dir for this process (creating it,
// readable by its owner only): two commands on one embedded JetStream
// store (two `medgym run`s, `env serve` beside a run) would each run a
// server over the same files, which breaks exactly-once delivery. A second
// process gets an error naming --state and the holder's process id. The
// lock is an flock on dir/lock, released by unlock or when the process
// ends, however it ends.
func lockState(dir, command string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	path := filepath.Join(dir, stateLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock --state %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := stateHolder(path)
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("--state %s is in use by %s: its embedded JetStream store serves one process at a time; "+
				"wait for that one to end, or pass --state a folder of this command's own", dir, holder)
		}
		return nil, fmt.Errorf("lock --state %s: %w", dir, err)
	}
	// The holder's line, for the error above; a failure to write it
	// leaves the lock held and only that error vaguer.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("%d %s\n", os.Getpid(), command)), 0)
	}
	return func() { _ = f.Close() }, nil
}

// stateHolder describes the process holding a state lock from its file.
func stateHolder(path string) string {
	b, err := os.ReadFile(path)
	pid, command, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	if err != nil || pid == "" {
		return "another process (it has not written its process id yet)"
	}
	if command == "" {
		return "process " + pid
	}
	return fmt.Sprintf("process %s (medgym %s)", pid, command)
}

// startEmbedded starts the embedded JetStream server of a command run
// without --nats over the state folder dir (which the caller has locked:
// lockState). The server listens nowhere: only this process connects, with
// the option returned. stop shuts it down.
func startEmbedded(dir string) (connect bus.ConnectOption, stop func(), err error) {
	ns, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(dir, "jetstream"), InProcess: true})
	if err != nil {
		return nil, nil, err
	}
	return bus.WithInProcess(ns), func() { ns.Shutdown(); ns.WaitForShutdown() }, nil
}
