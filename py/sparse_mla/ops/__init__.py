"""Compiled ops: FA3 (sgl-attn) built by //cc."""
