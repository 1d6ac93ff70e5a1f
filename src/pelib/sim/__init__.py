"""The simulator's host side: the engine's ABI and runs (engine), its builds (build), what a launch may
cost (budget), cached runs and their reports (runs), the mutation catalog (catalog), the bit-for-bit
proofs (proof), tensor maps (tensormap), and a stage's simulated run (host)."""
