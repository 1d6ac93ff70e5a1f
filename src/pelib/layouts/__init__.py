"""Shared-memory layouts: bank conflicts (banks) and the epilogue's staging (staging)."""
