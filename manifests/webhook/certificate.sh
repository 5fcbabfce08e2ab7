#!/usr/bin/env bash
# A CA and the webhook's serving certificate, with openssl:
#   bash manifests/webhook/certificate.sh DIR [extra subjectAltName entries, e.g. IP:127.0.0.1]
# writes DIR/ca.crt, DIR/tls.crt and DIR/tls.key, valid for the Service objcount-injector in
# config-management-system for 365 days. Keep DIR private; the CA key is not written out. Renew by
# running it again and repeating the install's Secret and caBundle steps (the webhook reloads its files).
set -euo pipefail
dir=${1:?usage: certificate.sh DIR [SAN...]}
shift
service=objcount-injector namespace=config-management-system
sans="DNS:$service.$namespace.svc,DNS:$service.$namespace.svc.cluster.local"
for extra in "$@"; do sans="$sans,$extra"; done
mkdir -p "$dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=objcount-webhook-ca" \
  -keyout "$work/ca.key" -out "$dir/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=$service.$namespace.svc" \
  -keyout "$dir/tls.key" -out "$work/tls.csr" 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$sans" > "$work/ext"
openssl x509 -req -in "$work/tls.csr" -CA "$dir/ca.crt" -CAkey "$work/ca.key" -CAcreateserial \
  -days 365 -extfile "$work/ext" -out "$dir/tls.crt" 2>/dev/null
chmod 600 "$dir/tls.key"
echo "$dir: ca.crt tls.crt tls.key"
