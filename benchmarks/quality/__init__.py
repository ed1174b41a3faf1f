"""Quality: accuracy on the labelled development sets, readout corrections, catalog strategies and readings, and whether a setting changes the answers."""
