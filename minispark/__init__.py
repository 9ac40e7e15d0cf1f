"""minispark: DSpark speculative decoding for local vision-language models on one consumer GPU."""

__version__ = "0.1.0"
