"""Step 3: torch. Loading models, packed passes over one shared prefix, readout, and the engine."""
