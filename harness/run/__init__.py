"""Running cells: the run config, presets, launching the services per cell (host or containers),
and the run / sweep / report / plot command bodies."""
