"""The compiled side: SASS (sass, sass_account), the cubin (elf), descriptors, and the hardware limits."""
