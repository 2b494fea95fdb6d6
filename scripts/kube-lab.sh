#!/usr/bin/env bash
# A real Kubernetes API server on loopback for the tests: build | up | down | dir.
#
# build: kube-apiserver and etcd compiled with the machine's Go from their Go modules (scripts/kube/go.mod pins
#        k8s.io/kubernetes and its staging modules to one release), into build/kube (ignored by git); nothing is
#        rebuilt while the binaries are newer than go.mod and go.sum. Never a downloaded binary.
# up:    etcd and kube-apiserver on loopback with TLS (a CA of the lab's own), token authentication (an admin token
#        in group system:masters, made afresh each time) and --authorization-mode=RBAC, so anything a test's service
#        account is not bound to is refused by the server itself. Prints the lab directory, which holds
#        admin.kubeconfig, ca.crt and the servers' logs. No kubelet, scheduler or controller manager runs: the tests
#        write what those would (pod phases, a PodDisruptionBudget's status); the ServiceAccount admission plugin is
#        off (without the controller manager no namespace has its default service account). Privileged pods are
#        allowed (--allow-privileged, as kubeadm sets it): raswarden's reboot Job is one.
# down:  stops both and removes the lab's state.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${KUBE_LAB_BUILD:-$ROOT/build/kube}
DIR=${KUBE_LAB_DIR:-/tmp/raswarden-kubelab}
API_PORT=${KUBE_LAB_PORT:-26443}
ETCD_PORT=${KUBE_LAB_ETCD_PORT:-23790}
ETCD_PEER_PORT=$((ETCD_PORT + 10))

. "$ROOT/scripts/lab-common.sh"

case "${1:-}" in
  build)
    command -v go >/dev/null || { echo "kube-lab: no Go on this machine (the Kubernetes tests need it)" >&2; exit 1; }
    cd "$ROOT/scripts/kube"
    built_after "$BUILD/kube-apiserver" go.mod go.sum && [ -x "$BUILD/etcd" ] && exit 0
    mkdir -p "$BUILD"
    version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
    go build -trimpath -o "$BUILD/etcd" go.etcd.io/etcd/server/v3
    go build -trimpath -ldflags "-X k8s.io/component-base/version.gitVersion=$version" \
      -o "$BUILD/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
    ;;
  up)
    [ -x "$BUILD/kube-apiserver" ] || { echo "kube-lab: not built (run: $0 build)" >&2; exit 1; }
    "$0" down >/dev/null 2>&1 || true
    mkdir -p "$DIR" && cd "$DIR"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 -subj "/CN=raswarden-kubelab-ca" \
      2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > san.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 30 \
      -extfile san.ext 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    token=$(openssl rand -hex 24)
    printf '%s,admin,admin,"system:masters"\n' "$token" > tokens.csv
    chmod 600 ./*.key tokens.csv
    setsid "$BUILD/etcd" --name lab --data-dir "$DIR/etcd" \
      --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
      --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
      --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
      --initial-cluster "lab=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls "" \
      > etcd.log 2>&1 < /dev/null &
    echo $! > etcd.pid
    setsid "$BUILD/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
      --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
      --tls-cert-file apiserver.crt --tls-private-key-file apiserver.key --client-ca-file ca.crt \
      --token-auth-file tokens.csv --authorization-mode RBAC \
      --service-account-key-file sa.pub --service-account-signing-key-file sa.key \
      --service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range 10.96.0.0/16 \
      --disable-admission-plugins ServiceAccount --allow-privileged=true \
      > apiserver.log 2>&1 < /dev/null &
    echo $! > apiserver.pid
    for _ in $(seq 1 240); do
      if curl -sf --cacert ca.crt -H "Authorization: Bearer $token" "https://127.0.0.1:$API_PORT/readyz" >/dev/null
      then
        cat > admin.kubeconfig <<EOF
apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$DIR/ca.crt"}
users:
- name: admin
  user: {token: "$token"}
contexts:
- name: lab
  context: {cluster: lab, user: admin}
current-context: lab
EOF
        chmod 600 admin.kubeconfig
        echo "$DIR"
        exit 0
      fi
      kill -0 "$(cat apiserver.pid)" 2>/dev/null || break
      sleep 0.5
    done
    echo "kube-lab: the API server did not become ready; the end of its log:" >&2
    tail -n 20 apiserver.log >&2
    "$0" down >/dev/null 2>&1 || true
    exit 1
    ;;
  down)
    stop_pid "$DIR/apiserver.pid"
    stop_pid "$DIR/etcd.pid"
    rm -rf "$DIR"
    ;;
  dir) echo "$DIR" ;;
  *) echo "usage: $0 build|up|down|dir" >&2; exit 2 ;;
esac
