#!/usr/bin/env bash
# cgroup2-vm.sh runs the sandbox's cgroup tests on a cgroup v2 (unified)
# host: a QEMU virtual machine booting Debian's kernel with this machine's
# root file system shared read-only over 9p, the v2 hierarchy mounted at
# /sys/fs/cgroup and the test process alone in a delegated, non-root cgroup
# (as a systemd service with Delegate=yes would be). Most hosts are v2 now; a v1
# host (or one whose controllers are all bound to v1) cannot test that
# path itself.
#
#   scripts/cgroup2-vm.sh [TEST_REGEXP...]
#
# Without arguments it runs the cgroup tests, then the cold backend's abuse
# cases that only cgroups contain (shared memory, fork bomb, leftovers),
# then the project quota test (Debian's kernel has the ext4 quota support
# that some hosts' kernels lack; its modules are loaded in the VM).
# The VM is about 10x slower than the host (emulated): too slow for the
# warm pool's imports and for the timing of the other abuse cases.
#
# Needs qemu-system-x86, a Debian kernel in /boot and busybox-static
# (WITH_VM=1 scripts/setup.sh installs them). The VM runs under TCG
# emulation by default (KVM, nested, is not usable everywhere): slow but
# real. MEDGYM_VM_ACCEL=kvm asks for KVM. Prints the tests' output and
# exits with their status.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
patterns=("$@")
if [ "${#patterns[@]}" = 0 ]; then
  patterns=('^(TestCgroupLimits|TestCgroupV2Delegation|TestStaleCgroupsReaped|TestVacate)$'
    '^TestAbuse$/^cold$/^(shared_memory_bomb|fork_bomb|background_processes_die_with_the_run)$'
    '^TestProjectQuota$/^cold')
fi
pkg=services/sandbox-worker/sandbox

kernel=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -1 || true)
busybox=$(command -v busybox || true)
qemu=$(command -v qemu-system-x86_64 || true)
if [ -z "$kernel" ] || [ -z "$busybox" ] || [ -z "$qemu" ]; then
  echo "cgroup2-vm: need qemu-system-x86_64, busybox and a kernel in /boot (WITH_VM=1 scripts/setup.sh)" >&2
  exit 1
fi
kver=${kernel#/boot/vmlinuz-}
mods=/usr/lib/modules/$kver/kernel

work=$(mktemp -d /tmp/medgym-vm.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/init/{bin,mod,proc,sys,dev,host} "$work/out"
cp "$busybox" "$work/init/bin/busybox"
# 9p over virtio, then ext4 with quotas, XFS and loop devices (the project
# quota tests), in load order.
order="drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_pci_legacy_dev
  drivers/virtio/virtio_pci_modern_dev drivers/virtio/virtio_pci fs/netfs/netfs fs/fscache/fscache
  net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p
  lib/crc16 crypto/crc32c_generic fs/mbcache fs/jbd2/jbd2 fs/ext4/ext4 fs/quota/quota_tree fs/quota/quota_v2
  lib/libcrc32c fs/xfs/xfs
  drivers/block/loop"
names=""
for m in $order; do
  n=$(basename "$m")
  if [ -f "$mods/$m.ko" ]; then cp "$mods/$m.ko" "$work/init/mod/$n.ko"
  elif [ -f "$mods/$m.ko.xz" ]; then xz -dc "$mods/$m.ko.xz" >"$work/init/mod/$n.ko"
  elif [ -f "$mods/$m.ko.zst" ]; then zstd -qdc "$mods/$m.ko.zst" >"$work/init/mod/$n.ko"
  else continue # built into this kernel
  fi
  names="$names $n"
done

cat >"$work/init/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $names; do insmod /mod/\$m.ko || echo "cgroup2-vm: insmod \$m failed"; done
R=/host
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 host \$R || echo "cgroup2-vm: no host root"
mount -t proc proc \$R/proc; mount -t sysfs sys \$R/sys; mount -t devtmpfs dev \$R/dev
mkdir -p \$R/dev/pts \$R/dev/shm; mount -t devpts devpts \$R/dev/pts; mount -t tmpfs shm \$R/dev/shm
mount -t tmpfs tmp \$R/tmp; mount -t tmpfs run \$R/run
mount -t cgroup2 cgroup2 \$R/sys/fs/cgroup
mkdir \$R/tmp/out; mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out \$R/tmp/out
echo "+memory +pids +cpu" > \$R/sys/fs/cgroup/cgroup.subtree_control
# switch_root, not chroot: a chrooted process may not create user
# namespaces, which bwrap needs. The script ends as pid 1, so the kernel
# panics and (panic=-1, -no-reboot) QEMU exits.
exec switch_root \$R /bin/sh -c '/bin/sh /tmp/out/run.sh > /tmp/out/log 2>&1; echo \$? > /tmp/out/rc; sync'
EOF
chmod +x "$work/init/init"
(cd "$work/init" && find . | cpio -o -H newc 2>/dev/null | gzip -1 >"$work/initrd.gz")

echo "cgroup2-vm: building the sandbox tests"
go test -c -o "$work/out/sandbox.test" "./$pkg"
cat >"$work/out/run.sh" <<EOF
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TMPDIR=/tmp
export CI=true MEDGYM_CGROUP=v2 MEDGYM_DATA='${MEDGYM_DATA:-}'
echo "kernel \$(uname -r), cgroup of the test: \$(cat /proc/self/cgroup)"
cd '$repo/$pkg'
rc=0
EOF
# Each run of the tests starts in a delegated cgroup of its own, as a
# systemd service with Delegate=yes does, holding only the test process.
n=0
for p in "${patterns[@]}"; do
  n=$((n + 1))
  svc=/sys/fs/cgroup/medgym-test-$n.service
  echo "mkdir $svc; sh -c 'echo \$\$ > $svc/cgroup.procs && exec \"\$@\"' sh /tmp/out/sandbox.test -test.run '$p' -test.count=1 -test.timeout=${MEDGYM_VM_TEST_TIMEOUT:-4m} -test.v || rc=1" >>"$work/out/run.sh"
done
echo 'exit $rc' >>"$work/out/run.sh"

accel=(-accel tcg -cpu max)
if [ "${MEDGYM_VM_ACCEL:-tcg}" = kvm ]; then accel=(-enable-kvm -cpu host); fi
echo "cgroup2-vm: booting $kernel (${MEDGYM_VM_ACCEL:-tcg}), running ${patterns[*]}"
# An emulated machine on a busy host can stall (seen once in many runs):
# a VM that does not finish within its time is shown and booted once more;
# a test that fails is not retried.
for try in 1 2; do
  rm -f "$work/out/rc" "$work/out/log"
  set +e
  timeout "${MEDGYM_VM_TIMEOUT:-420}" "$qemu" "${accel[@]}" -m 4G -smp 2 -nographic -no-reboot -nic none \
    -kernel "$kernel" -initrd "$work/initrd.gz" -append "console=ttyS0 panic=-1 loglevel=3" \
    -virtfs local,path=/,mount_tag=host,security_model=passthrough,readonly=on,multidevs=remap \
    -virtfs "local,path=$work/out,mount_tag=out,security_model=passthrough" </dev/null >"$work/console" 2>&1
  qrc=$?
  set -e
  cat "$work/out/log" 2>/dev/null || true
  if [ -s "$work/out/rc" ]; then
    exit "$(cat "$work/out/rc")"
  fi
  echo "cgroup2-vm: the VM did not finish (try $try, qemu exit $qrc); its console:" >&2
  tail -40 "$work/console" >&2
done
exit 1
