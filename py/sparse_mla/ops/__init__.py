"""Compiled ops: the decode kernels and the builder's per-token kernel (libsparse_mla_decode.so), FA3 with our
index conversion (libsparse_mla_fa3.so), both built by //cc under --config=sm90; library.py loads them."""
