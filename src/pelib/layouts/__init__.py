"""Shared-memory layouts: bank conflicts (banks), the FP8 epilogue's staging (staging) and the NVFP4 TMA-store
epilogue's staging tile (tma_staging)."""
