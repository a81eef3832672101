"""Orchestration side of the WAN training harness: CLI, link emulation, launch, results, reports."""
