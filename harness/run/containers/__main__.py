"""`python -m harness.run.containers`: the compose controller's command (docker-compose.yml)."""
import contextlib
import sys

from harness.run.containers.controller import main

with contextlib.suppress(KeyboardInterrupt):
    sys.exit(main())
sys.exit(130)
