"""Serving: the target, the decoding engine (propose → schedule → verify → accept → commit), drafters, scheduler, SPS lookup, the builder."""
