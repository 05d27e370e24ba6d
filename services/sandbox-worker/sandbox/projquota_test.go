package sandbox

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/medgym/medgym/schemas"
)

// TestQuotaABI checks the hand-written kernel structs and command numbers
// against the values of the C headers (x86-64 and arm64).
func TestQuotaABI(t *testing.T) {
	if n := unsafe.Sizeof(fsxattr{}); n != 28 {
		t.Errorf("sizeof(struct fsxattr) = %d, want 28", n)
	}
	if n := unsafe.Sizeof(dqblk{}); n != 72 {
		t.Errorf("sizeof(struct if_dqblk) = %d, want 72", n)
	}
	for name, c := range map[string][2]uint64{
		"FS_IOC_FSGETXATTR":           {uint64(fsIocFsgetxattr), 0x801c581f},
		"FS_IOC_FSSETXATTR":           {uint64(fsIocFssetxattr), 0x401c5820},
		"QCMD(Q_SETQUOTA, PRJQUOTA)":  {uint64(qcmd(qSetquota, prjQuota)), 0x80000802},
		"QCMD(Q_GETQUOTA, PRJQUOTA)":  {uint64(qcmd(qGetquota, prjQuota)), 0x80000702},
		"QCMD(Q_XGETQSTAT, PRJQUOTA)": {uint64(qcmd(qXGetqstat, prjQuota)), 0x580502},
		"QIF_BLIMITS":                 {qifBlimits, 1},
		"QIF_ILIMITS":                 {qifIlimits, 4},
	} {
		if c[0] != c[1] {
			t.Errorf("%s = %#x, want %#x", name, c[0], c[1])
		}
	}
}

// TestFsxattr sets and reads back the inherit flag of a directory on the
// test's own file system (a real FS_IOC_FS[GS]ETXATTR round trip), where it
// supports them.
func TestFsxattr(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := getFsxattr(f)
	if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("file system of %s has no fsxattr: %v", dir, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	a.Xflags |= fsXflagProjinherit
	if err := setFsxattr(f, a); err != nil {
		t.Skipf("cannot set the inherit flag here: %v", err)
	}
	b, err := getFsxattr(f)
	if err != nil || b.Xflags&fsXflagProjinherit == 0 || b.Projid != a.Projid {
		t.Fatalf("after setting the inherit flag: %+v, %v", b, err)
	}
}

// TestDiskQuotaMechanism: without project quotas (a plain temp dir) the
// watcher bounds the workspaces; a negative DiskBytes turns the bound off.
func TestDiskQuotaMechanism(t *testing.T) {
	s := newWith(0)(t, Config{})
	if _, err := newProjectQuota(s.cfg.WorkRoot, 1<<20, 1000); err == nil {
		t.Skip("the temp dir's file system has project quotas")
	}
	if st := s.Stats(); st.DiskQuota != DiskQuotaWatcher {
		t.Fatalf("disk quota %q on a plain temp dir, want %q", st.DiskQuota, DiskQuotaWatcher)
	}
	l := testLimits()
	l.DiskBytes = -1
	if st := newWith(0)(t, Config{Limits: l}).Stats(); st.DiskQuota != DiskQuotaOff {
		t.Fatalf("disk quota %q with DiskBytes -1, want %q", st.DiskQuota, DiskQuotaOff)
	}
}

// TestProjectQuota runs the sandbox on a loop-mounted ext4 (and XFS) with
// project quotas: a write past DiskBytes, or a file past DiskInodes, fails with EDQUOT (ENOSPC on XFS)
// inside the sandbox (a
// plain error result, nothing killed), the workspace stays within the
// limit, and after deleting files the code can write again. The warm
// backend's episode gets its workspace from a renamed slot directory.
func TestProjectQuota(t *testing.T) {
	for name, c := range map[string]struct {
		warm int
		fs   string
	}{"cold": {0, "ext4"}, "warm": {1, "ext4"}, "cold-xfs": {0, "xfs"}} {
		t.Run(name, func(t *testing.T) {
			warm := c.warm
			root := prjquotaRoot(t, c.fs)
			l := testLimits()
			l.DiskBytes = 16 << 20
			s := newWith(warm)(t, Config{WorkRoot: root, Limits: l})
			if st := s.Stats(); st.DiskQuota != DiskQuotaProject {
				t.Fatalf("disk quota %q on %s with prjquota, want %q", st.DiskQuota, c.fs, DiskQuotaProject)
			}
			if warm > 0 {
				deadline := time.Now().Add(2 * time.Minute)
				for s.Stats().PoolReady < 1 && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
			}
			ep := newEpisode()
			src := `import os
i = 0
try:
    while True:
        with open(f"/work/fill{i}", "wb") as f:
            f.write(os.urandom(4 << 20))
        i += 1
except OSError as e:
    print("wrote", i, "files, then:", e)
    raise
`
			r := exec1(t, s, code(ep, src, 60))
			if r.Status != schemas.StatusError || !quotaHit(r.Stdout) ||
				!strings.Contains(r.Message, "limited to 16 MiB on disk") {
				t.Fatalf("filling the workspace: %s %q", r.Status, r.Message)
			}
			if warm > 0 {
				if st := s.Stats(); st.PoolHits != 1 {
					t.Fatalf("the episode did not get a warm server's slot: %+v", st)
				}
			}
			ws := s.workspacePath(ep)
			if used, err := diskUsage(ws); err != nil || used > l.DiskBytes {
				t.Fatalf("workspace holds %d KiB (quota %d KiB): %v", used>>10, l.DiskBytes>>10, err)
			}
			// Generous timeouts: in the emulated VM a new episode's first
			// run takes ~20 s to start.
			r = exec1(t, s, code(ep, "import glob, os\nfor f in glob.glob('/work/fill*'): os.remove(f)\nopen('/work/again', 'wb').write(os.urandom(8 << 20))\nprint('clean')", 60))
			if r.Status != schemas.StatusOK || strings.TrimSpace(r.Stdout) != "clean" {
				t.Fatalf("writing again after deleting files: %+v", r)
			}
			// The code cannot move its files out of the project (bwrap runs
			// it in a user namespace of its own, where the kernel refuses).
			r = exec1(t, s, code(ep, escapeSrc, 60))
			t.Logf("changing the project id from inside:\n%s", r.Stdout)
			if r.Status != schemas.StatusOK || strings.Count(r.Stdout, "refused") != 2 || strings.Contains(r.Stdout, "projid 0 ") ||
				!strings.Contains(r.Stdout, "/work projid") || !strings.Contains(r.Stdout, "inherit True") {
				t.Fatalf("changing the workspace's project id from inside: %s %q", r.Status, r.Message)
			}
			// A second episode has a quota of its own.
			r = exec1(t, s, code(newEpisode(), "import os\nopen('/work/x', 'wb').write(os.urandom(12 << 20))\nprint('ok')", 60))
			if r.Status != schemas.StatusOK {
				t.Fatalf("a second episode's write within its own quota: %+v", r)
			}
			// Entries that take no blocks meet the project's inode limit
			// (Limits.DiskInodes, 1000 in tests; the workspace itself is one).
			ep = newEpisode()
			r = exec1(t, s, code(ep, inodeFloodSrc, 30))
			if u, err := walkUsage(s.workspacePath(ep), 0); err != nil || r.Status != schemas.StatusError || !quotaHit(r.Stdout) ||
				!strings.Contains(r.Message, "1000 files and directories") || u.entries >= l.DiskInodes {
				t.Fatalf("inode flood: %s %q, %+v %v", r.Status, r.Message, u, err)
			}
		})
	}
}

// escapeSrc tries to give the workspace and a file in it project id 0
// (FS_IOC_FSSETXATTR), which would take them out of the quota.
const escapeSrc = `import fcntl, os, struct
open('/work/mine', 'w').close()
for path in ('/work', '/work/mine'):
    fd = os.open(path, os.O_RDONLY)
    b = bytearray(28)
    fcntl.ioctl(fd, 0x801c581f, b)
    x = list(struct.unpack('5I8s', b))
    print(path, 'projid', x[3], 'inherit', bool(x[0] & 0x200))
    x[3] = 0
    try:
        fcntl.ioctl(fd, 0x401c5820, struct.pack('5I8s', *x))
        print('changed')
    except OSError as e:
        print('refused', e)
`

// prjquotaRoot loop-mounts a new file system (ext4 or xfs) with project
// quotas enforced and returns a WorkRoot on it. It skips without root, or
// when the image cannot be made or mounted, except in CI, where that fails
// the test unless the kernel was built without the quota support the file
// system needs.
func prjquotaRoot(t *testing.T, fstype string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loop mounts need root")
	}
	fail := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if why := kernelWithoutQuota(fstype); why != "" {
			t.Skipf("%s (%s)", msg, why)
		}
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir := openTempDir(t)
	img := filepath.Join(dir, "fs.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	err = errors.Join(f.Truncate(512<<20), f.Close()) // sparse; XFS wants 300 MiB at least
	if err != nil {
		t.Fatal(err)
	}
	mkfs := exec.Command("mkfs.ext4", "-q", "-O", "quota,project", img)
	if fstype == "xfs" {
		mkfs = exec.Command("mkfs.xfs", "-q", img)
	}
	if out, err := mkfs.CombinedOutput(); err != nil {
		fail("%s: %v: %s", mkfs, err, out)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		fail("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(dev, mnt, fstype, 0, "prjquota"); err != nil {
		fail("mount %s on %s with prjquota: %v", dev, mnt, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("umount %s: %v", mnt, err)
		}
	})
	if err := os.Chmod(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(mnt, "work")
}

// kernelWithoutQuota says why the running kernel cannot mount fstype with
// project quotas (ext4: built without CONFIG_QFMT_V2; xfs: without XFS or
// CONFIG_XFS_QUOTA), or "" when it can or its configuration is unknown.
func kernelWithoutQuota(fstype string) string {
	var cfg []byte
	if f, err := os.Open("/proc/config.gz"); err == nil {
		defer f.Close()
		if zr, err := gzip.NewReader(f); err == nil {
			cfg, _ = io.ReadAll(zr)
		}
	}
	if cfg == nil {
		var u unix.Utsname
		if unix.Uname(&u) == nil {
			cfg, _ = os.ReadFile("/boot/config-" + unix.ByteSliceToString(u.Release[:]))
		}
	}
	opt := "CONFIG_QFMT_V2"
	if fstype == "xfs" {
		if strings.Contains(string(cfg), "# CONFIG_XFS_FS is not set") {
			return "the kernel is built without XFS"
		}
		opt = "CONFIG_XFS_QUOTA"
	}
	if strings.Contains(string(cfg), "# "+opt+" is not set") {
		return "the kernel is built without " + opt
	}
	return ""
}
