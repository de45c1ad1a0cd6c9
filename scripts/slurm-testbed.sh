#!/usr/bin/env bash
# A real Slurm 24.11 controller with fake GB200 nodes on this machine, for the integration tests.
#
#   scripts/slurm-testbed.sh start  [DIR]  build and start it in DIR (default: a new `mktemp -d`); prints DIR
#   scripts/slurm-testbed.sh env    [DIR]  print the `export ...` lines for it (also in DIR/env)
#   scripts/slurm-testbed.sh status [DIR]  tell whether the daemons answer (exit 1 if not)
#   scripts/slurm-testbed.sh stop   [DIR]  stop every daemon, unmount, remove DIR (safe to run twice)
#   scripts/slurm-testbed.sh stop-ctld  [DIR]  stop only slurmctld (the "controller down" case)
#   scripts/slurm-testbed.sh kill-ctld  [DIR]  the same with SIGKILL at once (a hung controller, which
#                                              ignores SIGTERM: stop-ctld would wait 20 s for it)
#   scripts/slurm-testbed.sh start-ctld [DIR]  start slurmctld again and wait until it answers and every
#                                              node is idle or allocated (jobs survive the restart)
#
# DIR defaults to $RACKPLANE_SLURM_TESTBED for everything but start.
#
# Debian 12 ships Slurm 22.05, which has no topology/block, so Slurm 24.11 from Debian trixie runs in a
# debootstrap chroot (DIR/root) that shares this machine's network: slurmctld, 18 slurmd (one per compute
# tray of one NVL72 rack: gb-r01-t[01-18], each with 4 fake GPUs: character devices made with mknod),
# munged and slurmrestd (JWT), all on loopback ports picked free at start. DIR/bin holds wrappers
# (scontrol, sinfo, sbatch, squeue, sacct, sacctmgr, scancel) that run the chroot's programs, so callers use
# them like the real binaries. The controller reads DIR/root/etc/slurm: slurm.conf (testbed-owned) includes
# rackplane.conf (NodeName/PartitionName lines: what Rackplane manages) and topology/block reads
# topology.conf from the same folder.
#
# Accounting is real: slurmdbd (DbdPort on loopback, picked free) keeps it in MariaDB (socket only, no TCP
# port; a fresh database and password per testbed), both in the same chroot, started before slurmctld with
# the cluster `rackplane-testbed` registered (sacctmgr add cluster). slurm.conf has
# AccountingStorageType=accounting_storage/slurmdbd, AccountingStorageEnforce=associations,limits,qos and
# AccountingStorageTRES=gres/gpu: a job needs an association of its user with its account and a QOS that
# association allows, and a QOS's GrpTRES=gres/gpu limit holds jobs over it (pending, QOSGrpGRES). The MIG
# profiles' typed GRES are not listed: Rackplane's rackplane.conf adds them when a tray is in MIG mode (as it
# must on a site), and the tests prove slurmctld takes them from there.
# slurmrestd serves /slurmdb/ too (openapi/slurmdbd; slurmdbd.conf takes the same jwt_key), through which
# Rackplane writes QOS, accounts and associations (integrations/slurm/accounting.py). The testbed itself
# makes no account or association: a fresh one holds only `root`, so nobody may submit until Rackplane
# (or a test, tests/integration/conftest.py) gives them an association. sacctmgr works (DIR/bin/sacctmgr).
# Jobs are submitted through slurmrestd as the unprivileged user `rackplane` (RACKPLANE_SLURM_JOB_USER);
# finished jobs stay listed for an hour.
#
# People: three tenant users with their own uid and gid (TENANT_USERS below: ada 20001:20001, grace
# 20002:20002 and eve 20003:20003, plus a shared group `rp-shared` 20100), made at every start in the
# chroot's /etc/passwd and /etc/group (so the cached build stays valid), exported as
# RACKPLANE_SLURM_TENANT_USERS ("name:uid:gid ..."). ada and grace are the identity tests' people; eve is
# given no association by the tests (a person Slurm must refuse). Rackplane submits each person's job as
# that person: a token of SlurmUser (`slurm`, RACKPLANE_SLURM_REST_USER) minted from the jwt_key plus
# `X-SLURM-USER-NAME: <person>`. PrivateData=jobs: a user sees only their own jobs, as on a shared
# production cluster.
#
# The built chroot is cached as a tarball under ~/.cache/rackplane/slurm-testbed/ (scripts/lib.sh), so
# only the first start pays for debootstrap (with slurmdbd and MariaDB: 72 to 216 s measured on 2 busy
# cores, downloads included). The cache's name holds a hash of the suite, the package list and the
# architecture: changing PACKAGES (or ACCOUNTING_PACKAGES) builds a new one, and an old script's cache is
# never taken for the new one; caches of other package lists stay until unused for a week. Delete that
# folder to rebuild. Start-up from the cache, measured on a quiet machine: 4.2 s (4.1 s before slurmdbd),
# of which MariaDB takes 0.9 s and slurmdbd with the cluster's registration 0.4 s, while the larger
# tarball (121 MB instead of 60 MB) unpacks in 1.7 s; 12 to 14 s when the 2 cores are busy.
#
# RACKPLANE_SLURM_SUITE picks the Debian release the chroot is built from: trixie (Slurm 24.11, the default)
# or sid (the newest Slurm Debian has: 26.05 in November 2026; `make test-slurm-next`). Each suite has its
# own cached tarball (the file name starts with the suite).
#
# Settings: RACKPLANE_SLURM_NODES (number of fake trays, 1-18, default 18), RACKPLANE_SLURM_NO_CACHE=1 (do
# not read or write the chroot cache), RACKPLANE_KEEP_RUNTIME=1 (stop keeps DIR/log), RACKPLANE_READY_TIMEOUT.
#
# Needs root (debootstrap, chroot, mount). Inside the chroot the daemons run as the users they expect:
# munged as `munge` (it refuses root), mariadbd as `mysql`, slurmctld and slurmdbd drop to SlurmUser `slurm`,
# slurmrestd as an unprivileged `slurmrest` user (it refuses root and SlurmUser); slurmd stays root, as on a
# real node. `stop` ends them all (every process whose root is the chroot).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SUITE="${RACKPLANE_SLURM_SUITE:-trixie}"
PACKAGES="slurmctld,slurmd,slurm-client,munge,slurmrestd,slurm-wlm-jwt-plugin"
NODE_COUNT="${RACKPLANE_SLURM_NODES:-18}"
READY_TIMEOUT="${RACKPLANE_READY_TIMEOUT:-90}"
CACHE_DIR="$RACKPLANE_CACHE/slurm-testbed"
MARKER=".rackplane-slurm-testbed"
CLIENTS="scontrol sinfo sbatch squeue sacct sacctmgr scancel srun"
JOB_USER="rackplane"
# Tenant users (name:uid:gid): the people of tests/integration/test_slurm_identity.py, same names and ids as
# the LDAP and OpenID Connect testbeds give them (testbed/ldap, testbed/oidc-provider).
TENANT_USERS="ada:20001:20001 grace:20002:20002 eve:20003:20003"
SHARED_GROUP="rp-shared:20100"
# Accounting: slurmdbd on MariaDB in the same chroot. Part of PACKAGES, and so of the cache key (cache_file):
# a cache built without them is not used.
ACCOUNTING_PACKAGES="slurmdbd,mariadb-server"
PACKAGES="$PACKAGES,$ACCOUNTING_PACKAGES"
DB_PASSWORD_FILE="db-password"  # in DIR: slurmdbd's MariaDB password (fresh per testbed)

require_root() {
    [ "$(id -u)" -eq 0 ] || die "the Slurm testbed needs root (debootstrap, chroot, mount); run it as root"
}

testbed_dir_arg() {
    local dir="${1:-${RACKPLANE_SLURM_TESTBED:-}}"
    [ -n "$dir" ] || die "no testbed directory: pass it as an argument or set RACKPLANE_SLURM_TESTBED"
    [ -d "$dir" ] || die "testbed directory $dir does not exist"
    [ -f "$dir/$MARKER" ] || die "$dir was not made by '$(basename "$0") start'; leaving it alone"
    (cd "$dir" && pwd)
}

in_root() {
    local dir="$1"
    shift
    chroot "$dir/root" "$@"
}

# --- the chroot ---------------------------------------------------------------------------------------

ensure_debootstrap() {
    command -v debootstrap >/dev/null && [ -f /usr/share/debootstrap/scripts/$SUITE ] && return 0
    command -v apt-get >/dev/null || die "debootstrap is missing and there is no apt-get to install it with"
    log "installing Debian package: debootstrap"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
    fi
    [ -f /usr/share/debootstrap/scripts/$SUITE ] || die "this debootstrap does not know Debian $SUITE; update it"
}

cache_file() {
    local key
    key="$(printf '%s %s %s' "$SUITE" "$PACKAGES" "$(uname -m)" | sha256sum | cut -c1-12)"
    echo "$CACHE_DIR/$SUITE-$key.tar.zst"
}

build_root() {
    local dir="$1" cache started=$SECONDS
    cache="$(cache_file)"
    mkdir -p "$dir/root"
    if [ "${RACKPLANE_SLURM_NO_CACHE:-0}" != "1" ] && [ -f "$cache" ] && command -v zstd >/dev/null; then
        log "chroot: unpacking cached $SUITE root ($(basename "$cache"))"
        if tar --zstd -xpf "$cache" -C "$dir/root" --numeric-owner; then
            touch "$cache" # in use: not pruned (below)
            log "chroot: ready in $((SECONDS - started))s (from cache)"
            return 0
        fi
        log "chroot: the cache is unreadable; removing it and building afresh"
        rm -f "$cache"
        find "$dir/root" -mindepth 1 -delete
    fi
    ensure_debootstrap
    log "chroot: debootstrap $SUITE with $PACKAGES (takes about a minute)"
    # No mirror argument: debootstrap uses its default.
    if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$dir/root" >"$dir/log/debootstrap.log" 2>&1; then
        tail -n 20 "$dir/log/debootstrap.log" >&2
        die "debootstrap failed (end of $dir/log/debootstrap.log above)"
    fi
    rm -rf "$dir/root/var/cache/apt/archives/"*.deb "$dir/root/var/lib/apt/lists/"* 2>/dev/null || true
    log "chroot: built in $((SECONDS - started))s"
    if [ "${RACKPLANE_SLURM_NO_CACHE:-0}" != "1" ] && command -v zstd >/dev/null; then
        mkdir -p "$CACHE_DIR"
        # Other package lists' caches stay while in use: a clone with an older script (another package list)
        # on the same machine would otherwise evict this one at each run, and this one it. Unused for a week:
        # pruned.
        find "$CACHE_DIR" -maxdepth 1 -name "$SUITE-*.tar.zst" -mtime +7 -delete 2>/dev/null || true
        if tar --zstd -cpf "$cache.tmp" -C "$dir/root" --numeric-owner --one-file-system . 2>/dev/null; then
            mv "$cache.tmp" "$cache"
            log "chroot: cached as $cache"
        else
            rm -f "$cache.tmp"
            log "warning: could not write the chroot cache (continuing)"
        fi
    fi
}

mount_root() {
    local root="$1/root"
    cp /etc/hosts "$root/etc/hosts"
    [ -f /etc/resolv.conf ] && cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    mount -t proc proc "$root/proc"
    mount --bind /dev "$root/dev"
    mount --make-rslave "$root/dev"
    # slurmd looks at cgroups under /sys. rslave: unmounting our copy must never reach the host's /sys.
    mount --rbind /sys "$root/sys"
    mount --make-rslave "$root/sys"
}

mounts_under() {
    # Mount points at or below $1, deepest first.
    awk -v d="$1" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/self/mounts | sort -r
}

unmount_root() {
    local root="$1/root" left
    [ -d "$root" ] || return 0
    if mountpoint -q "$root/sys"; then umount -R "$root/sys" 2>/dev/null || umount -R -l "$root/sys" || true; fi
    if mountpoint -q "$root/dev"; then umount "$root/dev" 2>/dev/null || umount -l "$root/dev" || true; fi
    if mountpoint -q "$root/proc"; then umount "$root/proc" 2>/dev/null || umount -l "$root/proc" || true; fi
    left="$(mounts_under "$root")"
    if [ -n "$left" ]; then
        while read -r m; do umount -l "$m" 2>/dev/null || true; done <<<"$left"
    fi
    [ -z "$(mounts_under "$root")" ]
}

# --- configuration ------------------------------------------------------------------------------------

# Free loopback ports: one for slurmctld, one for slurmrestd, then NODE_COUNT consecutive ones for slurmd.
pick_ports() {
    python3 - "$NODE_COUNT" <<'PY'
import random, socket, sys
n = int(sys.argv[1])

def free(port):
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()

rng = random.SystemRandom()
for _ in range(500):
    base = rng.randrange(20000, 30000 - n - 2)
    ports = list(range(base, base + n + 2))
    if all(free(p) for p in ports):
        print(" ".join(map(str, ports)))
        break
else:
    sys.exit("no free block of loopback ports found")
PY
}

node_names() {
    local i
    for ((i = 1; i <= NODE_COUNT; i++)); do printf 'gb-r01-t%02d\n' "$i"; done
}

node_hostlist() {
    if [ "$NODE_COUNT" -eq 1 ]; then echo "gb-r01-t01"; else printf 'gb-r01-t[01-%02d]\n' "$NODE_COUNT"; fi
}

write_config() {
    local dir="$1" ctld_port="$2" node_port="$3" root="$1/root" etc="$1/root/etc/slurm" last_port
    last_port=$((node_port + NODE_COUNT - 1))
    mkdir -p "$etc" "$root/var/spool/slurmctld" "$root/var/spool/slurmd" "$root/var/log/slurm" \
        "$root/run/slurm" "$root/run/munge" "$root/opt/fakegpu"
    chown slurm: "$root/var/spool/slurmctld" "$root/var/log/slurm" "$root/run/slurm" 2>/dev/null ||
        in_root "$dir" chown slurm:slurm /var/spool/slurmctld /var/log/slurm /run/slurm

    # Four GPUs per tray: character devices (same numbers as /dev/null) that slurmd can stat and constrain.
    local i
    for i in 0 1 2 3; do
        [ -e "$root/opt/fakegpu/nvidia$i" ] || mknod "$root/opt/fakegpu/nvidia$i" c 1 3
    done
    # And MIG device files (a real node's /dev/nvidia-caps/nvidia-cap<N>, one per MIG device: slurmd ignores a
    # GPU GRES without a file) for tests that give a tray a MIG layout (tests/integration/test_slurm_mig.py):
    # 28 covers seven instances on each of four GPUs.
    mkdir -p "$root/opt/fakegpu/nvidia-caps"
    for i in $(seq 0 27); do
        [ -e "$root/opt/fakegpu/nvidia-caps/nvidia-cap$i" ] || mknod "$root/opt/fakegpu/nvidia-caps/nvidia-cap$i" c 1 3
    done

    cat >"$etc/slurm.conf" <<EOF
# Slurm testbed made by Rackplane's scripts/slurm-testbed.sh (throwaway; loopback only).
ClusterName=rackplane-testbed
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$node_port
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmdParameters=config_overrides
# No cgroup plugins: the fake nodes share one host; linuxproc tracks job processes without cgroups.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# Accounting through slurmdbd (write_dbd_config): jobs need an association (user, account) and a QOS it
# allows; a QOS's GrpTRES=gres/gpu limit holds jobs over it (pending, reason QOSGrpGRES).
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$(cat "$dir/dbd-port")
AccountingStorageEnforce=associations,limits,qos
# The site's own line. With a tray in MIG mode, rackplane.conf (included below, so it is read last) sets
# AccountingStorageTRES to gres/gpu and each MIG profile's typed GRES, so a QOS or association may limit each
# (GrpTRES=gres/gpu:1g.23gb=N: integrations.state.slurm_gpu_limits); slurmctld then logs "AccountingStorageTRES
# 1 specified more than once, latest value used".
AccountingStorageTRES=gres/gpu
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
# A user sees (and may signal) only their own jobs; SlurmUser and root see all (a shared cluster's setting).
PrivateData=jobs
# Finished jobs stay visible to squeue and slurmrestd for an hour (the default is 300 s), so a status poll
# after a slow test still finds them (tests/integration/test_slurm_jobs.py).
MinJobAge=3600
# A client (slurmrestd too) retries a controller it cannot reach once a second for MessageTimeout seconds
# before it gives up: 5 instead of the default 10 halves what each controller-down test waits out.
MessageTimeout=5
MpiDefault=none
SwitchType=switch/none
GresTypes=gpu
TopologyPlugin=topology/block
# Node and partition lines are Rackplane's (integrations/slurm); topology.conf is read beside this file.
Include /etc/slurm/rackplane.conf
EOF

    cat >"$etc/gres.conf" <<EOF
AutoDetect=off
Name=gpu File=/opt/fakegpu/nvidia[0-3]
EOF

    # Baseline (what Rackplane replaces): one rack, the default NVLink partition = one block.
    cat >"$etc/rackplane.conf" <<EOF
# Baseline written by scripts/slurm-testbed.sh; Rackplane's SlurmTarget replaces this file.
NodeName=$(node_hostlist) NodeHostName=localhost NodeAddr=127.0.0.1 Port=$( [ "$NODE_COUNT" -eq 1 ] && echo "$node_port" || echo "[$node_port-$last_port]") CPUs=4 RealMemory=1000 Gres=gpu:4 State=UNKNOWN
PartitionName=batch Nodes=ALL Default=YES State=UP MaxTime=INFINITE OverSubscribe=EXCLUSIVE
EOF
    cat >"$etc/topology.conf" <<EOF
BlockName=r01 Nodes=$(node_hostlist)
BlockSizes=$NODE_COUNT
EOF

    # HS256 key for JWT (slurmrestd, scontrol token); readable by SlurmUser only.
    head -c 32 /dev/urandom >"$etc/jwt_hs256.key"
    in_root "$dir" chown slurm:slurm /etc/slurm/jwt_hs256.key
    chmod 0600 "$etc/jwt_hs256.key"
    # A fresh munge key per testbed (the cached chroot must not share one).
    in_root "$dir" mungekey --create --force --keyfile=/etc/munge/munge.key >/dev/null
    in_root "$dir" chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
    chmod 0700 "$root/etc/munge"
    chmod 0600 "$root/etc/munge/munge.key"
    # slurmrestd refuses to run as root or SlurmUser.
    grep -q '^slurmrest:' "$root/etc/passwd" ||
        in_root "$dir" useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin slurmrest
    # The unprivileged user Rackplane submits jobs as through slurmrestd (JWT); jobs run in /tmp by default.
    grep -q "^$JOB_USER:" "$root/etc/passwd" ||
        in_root "$dir" useradd --create-home --home-dir "/home/$JOB_USER" --shell /bin/bash "$JOB_USER"
    # The tenants' people, each with their own uid and primary group, and one shared supplementary group.
    local entry name uid gid
    grep -q "^${SHARED_GROUP%%:*}:" "$root/etc/group" ||
        in_root "$dir" groupadd --gid "${SHARED_GROUP#*:}" "${SHARED_GROUP%%:*}"
    for entry in $TENANT_USERS; do
        IFS=: read -r name uid gid <<<"$entry"
        grep -q "^$name:" "$root/etc/group" || in_root "$dir" groupadd --gid "$gid" "$name"
        grep -q "^$name:" "$root/etc/passwd" ||
            in_root "$dir" useradd --uid "$uid" --gid "$gid" --groups "${SHARED_GROUP%%:*}" \
                --create-home --home-dir "/home/$name" --shell /bin/bash "$name"
    done
}

write_wrappers() {
    local dir="$1" c
    mkdir -p "$dir/bin"
    for c in $CLIENTS; do
        cat >"$dir/bin/$c" <<EOF
#!/bin/sh
# $c of the Slurm testbed in $dir (runs inside its chroot).
exec chroot '$dir/root' /usr/bin/$c "\$@"
EOF
        chmod 0755 "$dir/bin/$c"
    done
}

write_env() {
    local dir="$1"
    read -r ctld_port restd_port node_port <"$dir/ports"
    cat >"$dir/env" <<EOF
export RACKPLANE_SLURM_TESTBED='$dir'
export RACKPLANE_SLURM_BIN='$dir/bin'
export RACKPLANE_SLURM_SCONTROL='$dir/bin/scontrol'
export RACKPLANE_SLURM_CONF_DIR='$dir/root/etc/slurm'
export RACKPLANE_SLURM_LOG_DIR='$dir/root/var/log/slurm'
export RACKPLANE_SLURM_CTLD_PORT=$ctld_port
export RACKPLANE_SLURM_NODE_PORT_BASE=$node_port
export RACKPLANE_SLURM_NODES='$(node_hostlist)'
export RACKPLANE_SLURMRESTD_URL='http://127.0.0.1:$restd_port'
export RACKPLANE_SLURM_JWT_KEY='$dir/root/etc/slurm/jwt_hs256.key'
export RACKPLANE_SLURM_JOB_USER='$JOB_USER'
export RACKPLANE_SLURM_REST_USER='slurm'
export RACKPLANE_SLURM_TENANT_USERS='$TENANT_USERS'
export RACKPLANE_SLURM_SHARED_GID=${SHARED_GROUP#*:}
export RACKPLANE_SLURM_TESTBED_SCRIPT='$REPO_ROOT/scripts/slurm-testbed.sh'
EOF
}

# --- daemons ------------------------------------------------------------------------------------------

# PIDs of the live processes inside this testbed's chroot (their root is DIR/root). Zombies are left out:
# they are already dead (slurmctld and slurmd re-exec themselves on reconfigure; whoever is PID 1 reaps).
chroot_pids() {
    local root="$1/root" p r state
    root="$(readlink -f "$root")"
    for p in /proc/[0-9]*; do
        r="$(readlink "$p/root" 2>/dev/null)" || continue
        [ "$r" = "$root" ] || continue
        state="$(awk '{print $3}' "$p/stat" 2>/dev/null)" || continue
        [ "$state" = "Z" ] || echo "${p#/proc/}"
    done
    return 0
}

ctld_pid() {
    local f="$1/root/run/slurm/slurmctld.pid" pid
    [ -f "$f" ] || return 1
    pid="$(cat "$f")"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

start_munge() {
    local dir="$1"
    log "munged: starting"
    in_root "$dir" chown munge:munge /run/munge
    chroot --userspec=munge:munge "$dir/root" /usr/sbin/munged --num-threads=2 ||
        die "munged did not start (see $dir/root/var/log/munge/munged.log)"
    wait_until "munge" in_root "$dir" sh -c 'munge -n | unmunge >/dev/null'
}

# A Slurm daemon ($2: slurmctld, slurmdbd) started in the chroot, then waited for until the command after
# it answers; when either fails, the end of the daemon's log and the script stops.
start_slurm_daemon() {
    local dir="$1" name="$2"
    shift 2
    log "$name: starting"
    if ! in_root "$dir" "/usr/sbin/$name" >>"$dir/log/$name.out" 2>&1; then
        tail -n 20 "$dir/root/var/log/slurm/$name.log" >&2 2>/dev/null || true
        die "$name did not start (end of its log above)"
    fi
    if ! wait_until "$name" in_root "$dir" "$@"; then
        tail -n 20 "$dir/root/var/log/slurm/$name.log" >&2 2>/dev/null || true
        die "$name does not answer (end of its log above)"
    fi
}

start_ctld() {
    start_slurm_daemon "$1" slurmctld /usr/bin/scontrol ping
}

# slurmctld processes running in this testbed's chroot (whatever the pid file says).
ctld_pids_in_root() {
    local root proc
    root="$(readlink -f "$1/root")"
    for proc in /proc/[0-9]*; do
        [ "$(cat "$proc/comm" 2>/dev/null)" = slurmctld ] || continue
        [ "$(readlink -f "$proc/root" 2>/dev/null)" = "$root" ] && echo "${proc#/proc/}"
    done
    return 0
}

stop_ctld() {
    local dir="$1" grace="${2:-20}" pid deadline
    # `scontrol reconfigure` re-executes slurmctld (Slurm 23.11+): for a moment the pid file may still name
    # the old process. Find the running one by its chroot instead of believing a stale file.
    pid="$(ctld_pid "$dir" || true)"
    [ -n "$pid" ] || pid="$(ctld_pids_in_root "$dir" | head -n 1)"
    [ -n "$pid" ] || { log "slurmctld: not running"; return 0; }
    log "slurmctld: stopping (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + grace))
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.1
    done
    # A re-executed slurmctld may have been starting while the old one stopped: stop it too.
    for pid in $(ctld_pids_in_root "$dir"); do
        kill -KILL "$pid" 2>/dev/null || true
    done
}

start_slurmds() {
    local dir="$1" n
    log "slurmd: starting $NODE_COUNT nodes"
    while read -r n; do
        in_root "$dir" /usr/sbin/slurmd -N "$n" >>"$dir/log/slurmd.out" 2>&1 ||
            die "slurmd -N $n did not start (see $dir/root/var/log/slurm/slurmd-$n.log)"
    done < <(node_names)
}

start_restd() {
    local dir="$1" port="$2"
    log "slurmrestd: starting on 127.0.0.1:$port"
    # slurmrestd does not daemonize; it runs in the background and is found again by its chroot.
    SLURM_JWT=daemon setsid chroot "$dir/root" /usr/sbin/slurmrestd -u slurmrest -g slurmrest \
        -a rest_auth/jwt -s openapi/slurmctld,openapi/slurmdbd "127.0.0.1:$port" >>"$dir/log/slurmrestd.log" 2>&1 </dev/null &
    echo $! >"$dir/slurmrestd.pid"
    if ! wait_until "slurmrestd" python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)"; then
        tail -n 20 "$dir/log/slurmrestd.log" >&2 || true
        die "slurmrestd did not open its port (end of $dir/log/slurmrestd.log above)"
    fi
}

wait_until() {
    local what="$1" deadline=$((SECONDS + READY_TIMEOUT))
    shift
    until "$@" >/dev/null 2>&1; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "$what not ready within ${READY_TIMEOUT}s"
            return 1
        fi
        sleep 0.2
    done
}

nodes_idle() {
    local dir="$1" idle
    idle="$(in_root "$dir" /usr/bin/sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)"
    [ "$idle" -eq "$NODE_COUNT" ]
}

# Every node is usable again: idle, or running jobs that outlived a controller restart.
nodes_ready() {
    local dir="$1" ready
    ready="$(in_root "$dir" /usr/bin/sinfo -h -N -t idle,alloc,mix -o '%N' 2>/dev/null | sort -u | wc -l)"
    [ "$ready" -eq "$NODE_COUNT" ]
}

# --- accounting: MariaDB and slurmdbd -------------------------------------------------------------------

# A free loopback port for slurmdbd (picked apart from pick_ports' block, which stays as it is).
pick_dbd_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# MariaDB answers on its socket only (no TCP port to collide with); slurmdbd reaches it as StorageHost
# localhost. The database is a throwaway: no durability settings worth the fsyncs.
write_dbd_config() {
    local dir="$1" root="$1/root" password
    password="$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')"
    echo "$password" >"$dir/$DB_PASSWORD_FILE"
    chmod 0600 "$dir/$DB_PASSWORD_FILE"
    mkdir -p "$root/etc/mysql/mariadb.conf.d" "$root/run/mysqld"
    cat >"$root/etc/mysql/mariadb.conf.d/99-rackplane-testbed.cnf" <<EOF
# Written by Rackplane's scripts/slurm-testbed.sh: a throwaway database for slurmdbd, socket only.
[mariadbd]
skip-networking
skip-name-resolve
skip-log-bin
socket = /run/mysqld/mysqld.sock
pid-file = /run/mysqld/mysqld.pid
innodb_flush_log_at_trx_commit = 0
innodb_doublewrite = 0
# MariaDB 11.8 (trixie) defaults to snapshot isolation, which makes slurmdbd's updates fail with 1020 "Record
# has changed since last read" (measured: slurmctld's registration failed, it made up its own cluster ID, and
# every restart then died of "CLUSTER ID MISMATCH").
innodb_snapshot_isolation = OFF
innodb_buffer_pool_size = 64M
# slurmdbd's own advice (accounting.shtml): long enough for its table conversions.
innodb_lock_wait_timeout = 900
EOF
    in_root "$dir" chown mysql:mysql /run/mysqld
    # slurmdbd's client library looks for the socket where its release's server puts it: /run/mysqld on
    # trixie, /run/mariadbd on sid (measured: "Can't connect to local server through socket
    # '/run/mariadbd/mysqld.sock'"). One server, both paths.
    if [ -d "$root/run/mariadbd" ] && [ ! -L "$root/run/mariadbd" ]; then
        rmdir "$root/run/mariadbd"
    fi
    [ -e "$root/run/mariadbd" ] || ln -s mysqld "$root/run/mariadbd"
    cat >"$root/etc/slurm/slurmdbd.conf" <<EOF
# slurmdbd of the Slurm testbed made by Rackplane's scripts/slurm-testbed.sh (throwaway; loopback only).
AuthType=auth/munge
# slurmrestd's /slurmdb/ endpoints pass the caller's JWT on to slurmdbd.
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$(cat "$dir/dbd-port")
SlurmUser=slurm
PidFile=/run/slurm/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=$password
EOF
    in_root "$dir" chown slurm:slurm /etc/slurm/slurmdbd.conf
    chmod 0600 "$root/etc/slurm/slurmdbd.conf" # slurmdbd refuses one others may read
}

start_mariadb() {
    local dir="$1" password
    password="$(cat "$dir/$DB_PASSWORD_FILE")"
    log "mariadb: starting"
    if [ ! -d "$dir/root/var/lib/mysql/mysql" ]; then
        # The package's postinst normally made the system tables already (they are in the cached chroot).
        in_root "$dir" mariadb-install-db --user=mysql --datadir=/var/lib/mysql --skip-test-db \
            >>"$dir/log/mariadb.out" 2>&1 || die "mariadb-install-db failed (see $dir/log/mariadb.out)"
    fi
    setsid chroot "$dir/root" /usr/sbin/mariadbd --user=mysql >>"$dir/log/mariadb.out" 2>&1 </dev/null &
    if ! wait_until "mariadb" in_root "$dir" mariadb-admin --socket=/run/mysqld/mysqld.sock ping; then
        tail -n 20 "$dir/log/mariadb.out" >&2 || true
        die "mariadbd does not answer (end of $dir/log/mariadb.out above)"
    fi
    in_root "$dir" mariadb --socket=/run/mysqld/mysqld.sock -e "
        CREATE DATABASE IF NOT EXISTS slurm_acct_db;
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$password';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" || die "could not make slurmdbd's database user"
}

# slurmdbd, then the cluster registered (before slurmctld first starts, so that it finds its cluster).
start_dbd() {
    local dir="$1"
    start_slurm_daemon "$dir" slurmdbd /usr/bin/sacctmgr -n -P list cluster format=cluster
    in_root "$dir" /usr/bin/sacctmgr -i add cluster rackplane-testbed >/dev/null ||
        die "sacctmgr could not register the cluster rackplane-testbed"
}

# --- commands -----------------------------------------------------------------------------------------

cmd_start() {
    local dir started=$SECONDS ports ctld_port restd_port node_port
    require_root
    [[ "$NODE_COUNT" =~ ^[0-9]+$ ]] && [ "$NODE_COUNT" -ge 1 ] && [ "$NODE_COUNT" -le 18 ] ||
        die "RACKPLANE_SLURM_NODES must be 1..18 (one NVL72 rack), not '$NODE_COUNT'"
    if [ -n "${1:-}" ]; then
        mkdir -p "$1"
        dir="$(cd "$1" && pwd)"
    else
        dir="$(mktemp -d -t rackplane-slurm.XXXXXX)"
    fi
    [[ "$dir" != *[[:space:]\'\"]* ]] || die "the testbed directory must not contain white space or quotes: '$dir'"
    [ -z "$(ls -A "$dir")" ] || die "testbed directory $dir is not empty"
    touch "$dir/$MARKER"
    chmod 0755 "$dir"
    mkdir -p "$dir/log"
    STARTING_DIR="$dir"
    trap 'status=$?; if [ $status -ne 0 ]; then log "start failed; cleaning up $STARTING_DIR"; stop_dir "$STARTING_DIR"; fi' EXIT

    build_root "$dir"
    mount_root "$dir"
    ports="$(pick_ports)" || die "no free loopback ports"
    read -r ctld_port restd_port node_port _ <<<"$ports"
    echo "$ctld_port $restd_port $node_port" >"$dir/ports"
    echo "$NODE_COUNT" >"$dir/node-count"
    pick_dbd_port >"$dir/dbd-port" || die "no free loopback port for slurmdbd"
    write_config "$dir" "$ctld_port" "$node_port"
    write_dbd_config "$dir"
    write_wrappers "$dir"
    start_munge "$dir"
    start_mariadb "$dir"
    start_dbd "$dir"
    start_ctld "$dir"
    start_slurmds "$dir"
    start_restd "$dir" "$restd_port"
    log "waiting for $NODE_COUNT nodes to be idle"
    if ! wait_until "idle nodes" nodes_idle "$dir"; then
        in_root "$dir" /usr/bin/sinfo -N -l >&2 || true
        die "the nodes did not all become idle (sinfo above; logs in $dir/root/var/log/slurm)"
    fi
    write_env "$dir"
    trap - EXIT
    log "Slurm $(in_root "$dir" /usr/bin/scontrol --version | awk '{print $2}') testbed ready in $dir" \
        "after $((SECONDS - started))s ($NODE_COUNT nodes); environment in $dir/env"
    echo "$dir"
}

stop_dir() {
    local dir="$1" pids deadline
    # Every process whose root is this chroot is one of ours (daemons and any job steps).
    pids="$(chroot_pids "$dir")"
    if [ -f "$dir/slurmrestd.pid" ] && kill -0 "$(cat "$dir/slurmrestd.pid")" 2>/dev/null; then
        pids="$pids $(cat "$dir/slurmrestd.pid")"
    fi
    if [ -n "${pids// /}" ]; then
        log "stopping $(echo $pids | wc -w) processes"
        # shellcheck disable=SC2086
        kill -TERM $pids 2>/dev/null || true
        deadline=$((SECONDS + 15))
        while [ -n "$(chroot_pids "$dir")" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
        pids="$(chroot_pids "$dir")"
        # shellcheck disable=SC2086
        [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
        sleep 0.2
    fi
    if ! unmount_root "$dir"; then
        log "error: could not unmount everything under $dir/root; NOT removing it:"
        mounts_under "$dir/root" >&2
        return 1
    fi
    # The daemons' logs outlive the testbed where asked (scripts/test.sh: var/test-artifacts), for a failed
    # run's post-mortem: a test that fails under load names what the controller did only there.
    if [ -n "${RACKPLANE_SLURM_LOGS_TO:-}" ]; then
        mkdir -p "$RACKPLANE_SLURM_LOGS_TO" &&
            cp -a "$dir/root/var/log/slurm/." "$dir/log/." "$RACKPLANE_SLURM_LOGS_TO/" 2>/dev/null || true
    fi
    if [ "${RACKPLANE_KEEP_RUNTIME:-0}" = "1" ]; then
        mkdir -p "$dir/log/slurm" && cp -a "$dir/root/var/log/slurm/." "$dir/log/slurm/" 2>/dev/null || true
        rm -rf --one-file-system "$dir/root"
        log "kept $dir (logs in $dir/log)"
    else
        rm -rf --one-file-system "$dir"
    fi
}

cmd_status() {
    local dir="$1" ok=0 restd_port pid
    read -r _ restd_port _ <"$dir/ports"
    if pid="$(ctld_pid "$dir")" && in_root "$dir" /usr/bin/scontrol ping >/dev/null 2>&1; then
        echo "slurmctld: up (pid $pid, port $(cut -d' ' -f1 "$dir/ports"))"
    else
        pid="$(ctld_pids_in_root "$dir" | tr '\n' ' ')"
        echo "slurmctld: DOWN (${pid:+processes $pid alive but not answering}${pid:-no process})"
        ok=1
    fi
    local slurmds=0 p
    for p in $(chroot_pids "$dir"); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "slurmd" ] && slurmds=$((slurmds + 1))
    done
    echo "slurmd: $slurmds of $NODE_COUNT running"
    in_root "$dir" /usr/bin/sinfo -h -o '  %P %a %D %t %N' 2>/dev/null || true
    if python3 -c "import socket; socket.create_connection(('127.0.0.1', $restd_port), 1)" 2>/dev/null; then
        echo "slurmrestd: up on 127.0.0.1:$restd_port"
    else
        echo "slurmrestd: DOWN"
        ok=1
    fi
    return $ok
}

case "${1:-}" in
start) cmd_start "${2:-}" ;;
stop)
    # Idempotent: a testbed that is already gone is not an error.
    d="${2:-${RACKPLANE_SLURM_TESTBED:-}}"
    if [ -n "$d" ] && [ ! -e "$d" ]; then
        log "$d is already gone"
        exit 0
    fi
    require_root
    dir="$(testbed_dir_arg "${2:-}")"
    stop_dir "$dir"
    ;;
env | status | stop-ctld | kill-ctld | start-ctld)
    dir="$(testbed_dir_arg "${2:-}")"
    [ -f "$dir/ports" ] || die "$dir has no running testbed (start did not finish)"
    NODE_COUNT="$(cat "$dir/node-count")"
    case "$1" in
    env) cat "$dir/env" ;;
    status) cmd_status "$dir" ;;
    stop-ctld) require_root && stop_ctld "$dir" ;;
    kill-ctld) require_root && stop_ctld "$dir" 0 ;;
    start-ctld)
        require_root
        start_ctld "$dir"
        wait_until "ready nodes" nodes_ready "$dir" || log "warning: not every node is ready yet"
        ;;
    esac
    ;;
*)
    echo "usage: $0 start [DIR] | env [DIR] | status [DIR] | stop [DIR] | stop-ctld [DIR] | kill-ctld [DIR] | start-ctld [DIR]" >&2
    exit 2
    ;;
esac
