"""Numerics: the block FMA emulation (blockfma), tensor-core test vectors (tcvectors), tolerances (precision)."""
