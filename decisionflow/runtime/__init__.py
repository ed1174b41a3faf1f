"""Step 3: torch. Loading models, packed passes over one shared prefix, readout, fitted heads, the prepared-rubric cache and the engine."""
