"""Programs that run inside nodes, and the controllers that start and collect them."""
