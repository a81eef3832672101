#!/usr/bin/env bash
# docker-compose.yml as `docker stack deploy` reads it: the stack format takes `depends_on` as a list only
# ("services.learner.depends_on must be a list"), and a swarm ignores start order anyway; compose's
# `{condition: service_healthy}` (the controller checks every setting before the services start) becomes
# a plain list entry. Usage: docker stack deploy --resolve-image never -c <(docker/stack-file.sh) wan
set -euo pipefail
sed -E 's/^([[:space:]]*)([a-z_-]+): \{condition: service_healthy\}[[:space:]]*$/\1- \2/' \
  "${1:-$(dirname "$0")/../docker-compose.yml}"
