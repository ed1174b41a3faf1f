"""Fitting: fitted heads on the development sets (what they read, how they are fitted, what they cost) and in-context examples beside them."""
