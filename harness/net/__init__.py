"""Link emulation: WAN profiles, network namespaces, the shaping plan and its backends, link
counters, calibration, the preflight doctor and clean-up. Imports neither torch nor the results side."""
