package sandbox

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Workspace disk quotas. Where WorkRoot's file system enforces project
// quotas (ext4 made with -O quota,project and mounted with prjquota, or XFS
// mounted with prjquota), each workspace directory gets a project id of its
// own, with the inherit flag, and a hard block limit of Limits.DiskBytes:
// a write past it fails in the sandbox with EDQUOT ("Disk quota exceeded")
// and the code can handle that. Elsewhere the watcher (quota.go) measures
// the workspace during each run and kills a run that grows it too far.
//
// The project id is the inode number of the workspace directory, which no
// other live directory of the file system has. It is an attribute of the
// inode, so it survives the renames of the pools (a warm slot or a ready
// container's directory becoming an episode's workspace), and the
// workspace is bound before every run (bound), whoever made it. The limit
// of an id stays in the quota files after its workspace is removed: it is
// overwritten when the inode number is used for a workspace again, and
// clearing it at release could clear a new workspace's limit instead.

// Disk quota mechanisms, as in Stats.DiskQuota.
const (
	DiskQuotaProject = "project" // kernel-enforced project quotas
	DiskQuotaWatcher = "watcher" // the 100 ms watcher kills runs that grow past the quota
	DiskQuotaOff     = "off"     // Limits.DiskBytes < 0: no bound
)

// Kernel interfaces that golang.org/x/sys/unix (v0.50) does not provide:
// include/uapi/linux/fs.h (fsxattr), linux/quota.h (if_dqblk, Q_*),
// linux/dqblk_xfs.h (Q_XGETQSTAT, FS_QUOTA_*). Checked by TestQuotaABI.

// fsxattr is struct fsxattr, the argument of FS_IOC_FS[GS]ETXATTR.
type fsxattr struct {
	Xflags     uint32
	Extsize    uint32
	Nextents   uint32
	Projid     uint32
	Cowextsize uint32
	_          [8]byte
}

// dqblk is struct if_dqblk, the argument of Q_GETQUOTA and Q_SETQUOTA.
// Block limits are in 1 KiB units, Curspace in bytes; Valid says which
// fields Q_SETQUOTA sets.
type dqblk struct {
	Bhardlimit, Bsoftlimit, Curspace  uint64
	Ihardlimit, Isoftlimit, Curinodes uint64
	Btime, Itime                      uint64
	Valid                             uint32
	_                                 uint32
}

const (
	// _IOR('X', 31, struct fsxattr) and _IOW('X', 32, ...) in the generic
	// ioctl encoding (dir<<30 | size<<16 | type<<8 | nr) of x86 and arm64.
	fsIocFsgetxattr    = 2<<30 | uint(unsafe.Sizeof(fsxattr{}))<<16 | 'X'<<8 | 31
	fsIocFssetxattr    = 1<<30 | uint(unsafe.Sizeof(fsxattr{}))<<16 | 'X'<<8 | 32
	fsXflagProjinherit = 0x200

	qGetquota   = 0x800007
	qSetquota   = 0x800008
	qXGetqstat  = 'X'<<8 | 5
	prjQuota    = 2
	qifBlimits  = 1
	qifIlimits  = 4
	qifDQBlock  = 1024 // bytes in a dqblk block unit
	pdqAcct     = 0x10 // FS_QUOTA_PDQ_ACCT: project usage is accounted
	pdqEnforced = 0x20 // FS_QUOTA_PDQ_ENFD: project limits are enforced
)

// qcmd is QCMD(cmd, type).
func qcmd(cmd, typ uint32) uint32 { return cmd<<8 | typ&0xff }

// quotactlFD is quotactl_fd(2) (Linux 5.14+): the quota command on the
// file system holding fd, no block device path needed.
func quotactlFD(fd uintptr, cmd, id uint32, addr unsafe.Pointer) error {
	_, _, e := unix.Syscall6(unix.SYS_QUOTACTL_FD, fd, uintptr(cmd), uintptr(id), uintptr(addr), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getFsxattr(f *os.File) (fsxattr, error) {
	var a fsxattr
	_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(fsIocFsgetxattr), uintptr(unsafe.Pointer(&a)))
	if e != 0 {
		return a, fmt.Errorf("FS_IOC_FSGETXATTR: %w", e)
	}
	return a, nil
}

func setFsxattr(f *os.File, a fsxattr) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(fsIocFssetxattr), uintptr(unsafe.Pointer(&a)))
	if e != 0 {
		return fmt.Errorf("FS_IOC_FSSETXATTR: %w", e)
	}
	return nil
}

// projectQuota sets per-workspace project quotas on one file system.
type projectQuota struct {
	root   *os.File // WorkRoot, the handle for quotactl_fd
	limit  uint64   // hard block limit, in qifDQBlock units
	inodes uint64   // hard inode limit
}

// newProjectQuota returns the project quota setter for the workspaces of
// root, or an error saying why they cannot have one: the kernel lacks
// quotactl_fd, the file system does not account and enforce project
// quotas, or the worker may not set them (it must be root in the initial
// user namespace). It proves the whole path on a probe directory.
func newProjectQuota(root string, limitBytes, inodes int64) (*projectQuota, error) {
	f, err := os.Open(root)
	if err != nil {
		return nil, err
	}
	q := &projectQuota{root: f, limit: uint64(max(limitBytes/qifDQBlock, 1)), inodes: uint64(max(inodes, 1))}
	if err := q.check(root); err != nil {
		f.Close()
		return nil, err
	}
	return q, nil
}

func (q *projectQuota) check(root string) error {
	// fs_quota_stat: qs_flags is the __u16 at offset 2. The buffer is
	// larger than the struct (80 bytes) and 8-byte aligned.
	var st [16]uint64
	if err := quotactlFD(q.root.Fd(), qcmd(qXGetqstat, prjQuota), 0, unsafe.Pointer(&st)); err != nil {
		return fmt.Errorf("quotactl_fd(Q_XGETQSTAT): %w", err)
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&st)), 8)
	if flags := binary.NativeEndian.Uint16(b[2:4]); flags&(pdqAcct|pdqEnforced) != pdqAcct|pdqEnforced {
		return fmt.Errorf("project quotas not enforced on this file system (quota flags %#x; mount it with prjquota)", flags)
	}
	probe := filepath.Join(root, metaDir, "quota-probe")
	_ = os.RemoveAll(probe)
	if err := os.Mkdir(probe, 0o700); err != nil {
		return err
	}
	defer os.Remove(probe)
	id, err := q.bind(probe)
	if err != nil {
		return err
	}
	var d dqblk
	if err := quotactlFD(q.root.Fd(), qcmd(qGetquota, prjQuota), id, unsafe.Pointer(&d)); err != nil {
		return fmt.Errorf("quotactl_fd(Q_GETQUOTA): %w", err)
	}
	if d.Bhardlimit != q.limit || d.Ihardlimit != q.inodes {
		return fmt.Errorf("project %d: limits %d KiB, %d inodes after setting %d KiB, %d inodes", id, d.Bhardlimit, d.Ihardlimit, q.limit, q.inodes)
	}
	return nil
}

// bind gives the directory dir its own project (its inode number, with the
// inherit flag) limited to q.limit, unless it has it already, and returns
// the project id.
func (q *projectQuota) bind(dir string) (uint32, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, err
	}
	if st.Ino == 0 || st.Ino > math.MaxUint32 {
		return 0, fmt.Errorf("inode number %d does not fit a project id", st.Ino)
	}
	id := uint32(st.Ino)
	a, err := getFsxattr(f)
	if err != nil {
		return 0, err
	}
	if a.Projid == id && a.Xflags&fsXflagProjinherit != 0 {
		return id, nil // the limit was set before the attribute
	}
	d := dqblk{Bhardlimit: q.limit, Ihardlimit: q.inodes, Valid: qifBlimits | qifIlimits}
	if err := quotactlFD(q.root.Fd(), qcmd(qSetquota, prjQuota), id, unsafe.Pointer(&d)); err != nil {
		return 0, fmt.Errorf("quotactl_fd(Q_SETQUOTA): %w", err)
	}
	a.Projid = id
	a.Xflags |= fsXflagProjinherit
	return id, setFsxattr(f, a)
}

func (q *projectQuota) close() error { return q.root.Close() }

// setupDiskQuota picks the disk quota mechanism for the workspaces (called
// once by New, after prepareWorkRoot) and logs it.
func (s *Sandbox) setupDiskQuota() {
	if s.cfg.Limits.DiskBytes < 0 {
		s.diskQuota = DiskQuotaOff
		s.log.Info("sandbox: workspace disk quota off")
		return
	}
	q, err := newProjectQuota(s.cfg.WorkRoot, s.cfg.Limits.DiskBytes, s.cfg.Limits.DiskInodes)
	if err != nil {
		s.diskQuota = DiskQuotaWatcher
		s.log.Info("sandbox: workspace disk quota by the watcher (no project quotas)", "work_root", s.cfg.WorkRoot, "reason", err)
		return
	}
	s.quota, s.diskQuota = q, DiskQuotaProject
	s.log.Info("sandbox: workspace disk quota by project quotas", "work_root", s.cfg.WorkRoot, "limit_mib", s.cfg.Limits.DiskBytes>>20,
		"limit_inodes", s.cfg.Limits.DiskInodes)
}

// watchLimit binds the workspace to its project quota and returns the
// limits for the watcher: none (zero) when the kernel enforces the quota.
// A workspace the quota cannot bind is watched, as without project quotas.
// So is every docker workspace: its code runs in the initial user
// namespace, where the owner of a file may change its project id (bwrap's
// runs are in a user namespace of their own, where the kernel refuses
// that), and so could move its files out of the quota.
func (s *Sandbox) watchLimit(workspace string) quotaLimits {
	lim := quotaLimits{bytes: s.cfg.Limits.DiskBytes, entries: s.cfg.Limits.DiskInodes}
	if s.quota == nil {
		return lim
	}
	if _, err := s.quota.bind(workspace); err != nil {
		s.log.Warn("sandbox: workspace has no project quota; the watcher bounds it", "workspace", workspace, "err", err)
		return lim
	}
	if s.cfg.Backend == BackendDocker {
		return lim
	}
	return quotaLimits{}
}

// quotaHit reports whether output shows a write that the workspace's
// project quota refused: EDQUOT on ext4, ENOSPC on XFS (which reports a
// project quota as the directory tree running out of space), as strerror
// words them.
func quotaHit(output string) bool {
	return strings.Contains(output, "Disk quota exceeded") || strings.Contains(output, "No space left on device")
}
