package sandbox

import (
	"time"
)

// WorkDir is the path of the episode workspace inside the sandbox; it is
// the working directory of every run and the only writable directory that
// persists across turns.
const WorkDir = "/work"

// DataDir is where resources are mounted (read-only) inside the sandbox.
const DataDir = "/data"

// Backends.
const (
	BackendBwrap  = "bwrap"
	BackendDocker = "docker"
)

// Limits bound one run.
type Limits struct {
	MemoryBytes   int64         // address space for data (rlimit) and cgroup memory limit
	Pids          int           // processes/threads (cgroup pids.max, rlimit nproc backstop)
	CPUSeconds    int           // CPU time (rlimit); exceeding it is reported as a timeout
	CPUs          float64       // CPU quota (cgroup cfs quota), e.g. 1.0
	FileSizeBytes int64         // largest file a run may write (rlimit fsize)
	DiskBytes     int64         // workspace size: a project quota (EDQUOT past it) where WorkRoot's file system has them, else a run that grows it past this is killed; < 0: none (nor a file count limit)
	DiskInodes    int64         // files, directories and links in the workspace: the project quota's inode limit, else a run that grows their number past this is killed
	OutputBytes   int           // cap for stdout and for stderr, each
	NoFile        int           // open files (rlimit nofile)
	WallTimeout   time.Duration // used when ActionRequest.TimeoutSec is 0
}

// DefaultLimits are medgym's defaults.
func DefaultLimits() Limits {
	return Limits{
		MemoryBytes:   2 << 30,
		Pids:          128,
		CPUSeconds:    300,
		CPUs:          1,
		FileSizeBytes: 256 << 20,
		DiskBytes:     1 << 30,
		DiskInodes:    100_000,
		OutputBytes:   256 << 10,
		NoFile:        256,
		WallTimeout:   120 * time.Second,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.Pids <= 0 {
		l.Pids = d.Pids
	}
	if l.CPUSeconds <= 0 {
		l.CPUSeconds = d.CPUSeconds
	}
	if l.CPUs <= 0 {
		l.CPUs = d.CPUs
	}
	if l.FileSizeBytes <= 0 {
		l.FileSizeBytes = d.FileSizeBytes
	}
	if l.OutputBytes <= 0 {
		l.OutputBytes = d.OutputBytes
	}
	if l.DiskBytes == 0 {
		l.DiskBytes = d.DiskBytes
	}
	if l.DiskInodes <= 0 {
		l.DiskInodes = d.DiskInodes
	}
	if l.NoFile <= 0 {
		l.NoFile = d.NoFile
	}
	if l.WallTimeout <= 0 {
		l.WallTimeout = d.WallTimeout
	}
	return l
}

// Config configures a Sandbox.
type Config struct {
	Backend  string // BackendBwrap (default) or BackendDocker
	Python   string // interpreter inside the sandbox; default "/usr/bin/python3"
	Bwrap    string // bubblewrap binary; default: looked up on PATH
	DataRoot string // host dir; ActionRequest.Resources are relative to it
	// WorkRoot holds the per-episode workspaces (default: a new temp dir).
	// Everything in it that looks like a workspace is removed at start-up.
	WorkRoot string
	Limits   Limits
	IdleTTL  time.Duration // workspaces unused this long are removed (0: 30 min)
	Warm     int           // warm fork servers kept ready (0: cold runs)
	// DisableSeccomp turns off the bwrap backend's seccomp filter (see
	// seccomp.go and SANDBOX.md), which is on by default. The docker
	// backend always has Docker's own default profile.
	DisableSeccomp bool
	// RequireCgroups makes New fail when the bwrap backend cannot give each
	// run its own cgroup (v1, or v2 with the controllers delegated), rather
	// than warn and rely on rlimits, which do not bound shared memory or
	// CPU share. The docker backend's limits are the engine's.
	RequireCgroups bool
	// DockerImage is the image of the docker backend (see
	// scripts/sandbox-image.sh); default "medgym/sandbox:latest".
	DockerImage string
	// DockerReady is how many containers the docker backend keeps started
	// and ready for new episodes, in all, for the resource sets used most
	// recently (see dockerPool); 0 starts every episode's container on
	// demand.
	DockerReady int
}

func (c Config) withDefaults() Config {
	if c.Backend == "" {
		c.Backend = BackendBwrap
	}
	if c.Python == "" {
		c.Python = "/usr/bin/python3"
	}
	if c.IdleTTL <= 0 {
		c.IdleTTL = 30 * time.Minute
	}
	if c.DockerImage == "" {
		c.DockerImage = "medgym/sandbox:latest"
	}
	c.Limits = c.Limits.withDefaults()
	return c
}
