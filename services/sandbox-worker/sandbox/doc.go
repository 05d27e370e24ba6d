// Package sandbox runs agent actions (validate_code, terminal,
// request_info) in an isolated, per-episode workspace.
//
// Agent code is treated as hostile. Every run happens inside bubblewrap
// with new user/pid/net/ipc/uts/mount/cgroup namespaces, as uid 65534, with
// all capabilities dropped, a seccomp filter that denies syscalls such code
// never needs (ptrace, mount, nested namespaces, bpf, keyctl, io_uring...;
// see seccomp.go), a read-only minimal root (only /usr and the few
// /etc files Python needs), read-only task data under /data, and the
// episode's workspace as the only writable directory (WorkDir). Limits are
// applied twice: rlimits (CPU, data, nproc, fsize, nofile) and, when the
// worker's cgroups are writable (v1, or v2 with the controllers delegated;
// cgroup.go), a per-run (or per warm server) cgroup with memory, pids and
// CPU quota. Output is read through capped buffers.
//
// Three backends implement the same contract: "bwrap" (a cold interpreter
// per run), "bwrap" with Config.Warm > 0 (a per-episode fork server that
// has pandas, numpy, scipy and sklearn imported, inside the same
// isolation), and "docker" (a container per episode via the Docker engine
// API, running the same fork server; forkserver.go is the worker's side of
// it for both). With Config.DockerReady > 0 the docker backend keeps
// containers ready for new episodes (docker_pool.go), one episode each.
// See SANDBOX.md in the module root for the design and measured numbers.
package sandbox
