"""SHA-256 of logits rows on the GPU, bit for bit `hashlib.sha256` of each row's canonical bytes
(little-endian float32, C order: `samebits.outputs.logits_row_bytes`).

One lane per row: SHA-256 is a serial chain over the row's 64-byte blocks, so a program of
`BLOCK_R` lanes hashes `BLOCK_R` rows side by side, each lane walking its own row. The message
words are the row's 32-bit words read big-endian (a byte swap of the little-endian load); the
padding follows FIPS 180-4 for a message of `4 * num_words` bytes (a whole number of words:
the 0x80 byte starts a word; the bit length fits in 32 bits for rows under 2**27 words).
Integer arithmetic only (uint32, wrapping), so the digest never depends on the device, the
batch or the launch: the tests compare it with hashlib on the CPU interpreter and the H200.
"""

from __future__ import annotations

import triton
import triton.language as tl

# argument lists of 24 words stay compact:
# fmt: off


@triton.jit
def _rotr(x, n: tl.constexpr):
    return (x >> n) | (x << (32 - n))


@triton.jit
def _bswap(x):
    return ((x & 0xFF) << 24) | ((x & 0xFF00) << 8) | ((x >> 8) & 0xFF00) | (x >> 24)


@triton.jit
def _ssig0(x):
    return _rotr(x, 7) ^ _rotr(x, 18) ^ (x >> 3)


@triton.jit
def _ssig1(x):
    return _rotr(x, 17) ^ _rotr(x, 19) ^ (x >> 10)


@triton.jit
def _const(k_ptr, i):
    """Constant `i` of the table (K[0..63], H0[0..7], the padding word) as uint32."""
    return tl.load(k_ptr + i).to(tl.uint32, bitcast=True)


@triton.jit
def _round(a, b, c, d, e, f, g, h, wk):
    """One compression round; `wk` = W[t] + K[t]."""
    t1 = h + (_rotr(e, 6) ^ _rotr(e, 11) ^ _rotr(e, 25)) + (g ^ (e & (f ^ g))) + wk
    t2 = (_rotr(a, 2) ^ _rotr(a, 13) ^ _rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))
    return t1 + t2, a, b, c, d + t1, e, f, g


@triton.jit
def _rounds16(
    a, b, c, d, e, f, g, h, w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13, w14,
    w15, k_ptr, base
):
    """Rounds base .. base + 15 with the message schedule window w0..w15 = W[base ..]."""
    a, b, c, d, e, f, g, h = _round(a, b, c, d, e, f, g, h, w0 + _const(k_ptr, base + 0))
    a, b, c, d, e, f, g, h = _round(a, b, c, d, e, f, g, h, w1 + _const(k_ptr, base + 1))
    a, b, c, d, e, f, g, h = _round(a, b, c, d, e, f, g, h, w2 + _const(k_ptr, base + 2))
    a, b, c, d, e, f, g, h = _round(a, b, c, d, e, f, g, h, w3 + _const(k_ptr, base + 3))
    a, b, c, d, e, f, g, h = _round(a, b, c, d, e, f, g, h, w4 + _const(k_ptr, base + 4))
    a, b, c, d, e, f, g, h = _round(a, b, c, d, e, f, g, h, w5 + _const(k_ptr, base + 5))
    a, b, c, d, e, f, g, h = _round(a, b, c, d, e, f, g, h, w6 + _const(k_ptr, base + 6))
    a, b, c, d, e, f, g, h = _round(a, b, c, d, e, f, g, h, w7 + _const(k_ptr, base + 7))
    a, b, c, d, e, f, g, h = _round(a, b, c, d, e, f, g, h, w8 + _const(k_ptr, base + 8))
    a, b, c, d, e, f, g, h = _round(a, b, c, d, e, f, g, h, w9 + _const(k_ptr, base + 9))
    a, b, c, d, e, f, g, h = _round(a, b, c, d, e, f, g, h, w10 + _const(k_ptr, base + 10))
    a, b, c, d, e, f, g, h = _round(a, b, c, d, e, f, g, h, w11 + _const(k_ptr, base + 11))
    a, b, c, d, e, f, g, h = _round(a, b, c, d, e, f, g, h, w12 + _const(k_ptr, base + 12))
    a, b, c, d, e, f, g, h = _round(a, b, c, d, e, f, g, h, w13 + _const(k_ptr, base + 13))
    a, b, c, d, e, f, g, h = _round(a, b, c, d, e, f, g, h, w14 + _const(k_ptr, base + 14))
    a, b, c, d, e, f, g, h = _round(a, b, c, d, e, f, g, h, w15 + _const(k_ptr, base + 15))
    return a, b, c, d, e, f, g, h


@triton.jit
def _expand16(w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13, w14, w15):
    """W[t + 16 .. t + 31] from the window W[t .. t + 15]."""
    n0 = _ssig1(w14) + w9 + _ssig0(w1) + w0
    n1 = _ssig1(w15) + w10 + _ssig0(w2) + w1
    n2 = _ssig1(n0) + w11 + _ssig0(w3) + w2
    n3 = _ssig1(n1) + w12 + _ssig0(w4) + w3
    n4 = _ssig1(n2) + w13 + _ssig0(w5) + w4
    n5 = _ssig1(n3) + w14 + _ssig0(w6) + w5
    n6 = _ssig1(n4) + w15 + _ssig0(w7) + w6
    n7 = _ssig1(n5) + n0 + _ssig0(w8) + w7
    n8 = _ssig1(n6) + n1 + _ssig0(w9) + w8
    n9 = _ssig1(n7) + n2 + _ssig0(w10) + w9
    n10 = _ssig1(n8) + n3 + _ssig0(w11) + w10
    n11 = _ssig1(n9) + n4 + _ssig0(w12) + w11
    n12 = _ssig1(n10) + n5 + _ssig0(w13) + w12
    n13 = _ssig1(n11) + n6 + _ssig0(w14) + w13
    n14 = _ssig1(n12) + n7 + _ssig0(w15) + w14
    n15 = _ssig1(n13) + n8 + _ssig0(n0) + w15
    return n0, n1, n2, n3, n4, n5, n6, n7, n8, n9, n10, n11, n12, n13, n14, n15


@triton.jit
def _compress(
    h0, h1, h2, h3, h4, h5, h6, h7, w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13,
    w14, w15, k_ptr
):
    """The state after one 64-byte block (message words w0..w15): four groups of 16 rounds in
    a loop (one copy of the round code), the window advanced after each group."""
    a, b, c, d, e, f, g, h = h0, h1, h2, h3, h4, h5, h6, h7
    for group in range(4):
        a, b, c, d, e, f, g, h = _rounds16(
            a, b, c, d, e, f, g, h, w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13,
            w14, w15, k_ptr, group * 16
        )
        w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13, w14, w15 = _expand16(
            w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13, w14, w15
        )
    return h0 + a, h1 + b, h2 + c, h3 + d, h4 + e, h5 + f, h6 + g, h7 + h


@triton.jit
def _word(p, index, num_words, live, pad):
    """Message word `index` of a row at `p` (per lane), big-endian: the row's word, then the
    padding word (the 0x80 byte), then zeros."""
    data = tl.load(p + index, mask=live & (index < num_words), other=0).to(tl.uint32, bitcast=True)
    return tl.where(index < num_words, _bswap(data), tl.where(index == num_words, pad, data & 0))


@triton.jit
def _block(p, blk, num_words, live, pad):
    """The 16 message words of block `blk` (past the message: the padding, then zeros)."""
    base = blk * 16
    return (
        _word(p, base + 0, num_words, live, pad), _word(p, base + 1, num_words, live, pad),
        _word(p, base + 2, num_words, live, pad), _word(p, base + 3, num_words, live, pad),
        _word(p, base + 4, num_words, live, pad), _word(p, base + 5, num_words, live, pad),
        _word(p, base + 6, num_words, live, pad), _word(p, base + 7, num_words, live, pad),
        _word(p, base + 8, num_words, live, pad), _word(p, base + 9, num_words, live, pad),
        _word(p, base + 10, num_words, live, pad), _word(p, base + 11, num_words, live, pad),
        _word(p, base + 12, num_words, live, pad), _word(p, base + 13, num_words, live, pad),
        _word(p, base + 14, num_words, live, pad), _word(p, base + 15, num_words, live, pad),
    )


@triton.jit(do_not_specialize=["num_rows", "num_words", "row_stride"])
def sha256_rows_kernel(rows_ptr, out_ptr, k_ptr, num_rows, num_words, row_stride,
                       BLOCK_R: tl.constexpr):  # fmt: skip
    """out[r, 0:8] = SHA-256 state words of row r (int32 bit patterns of the big-endian
    digest words); rows are int32 views of float32 rows. One loop over the message's blocks,
    the padding blocks included (one copy of the compression code)."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    live = r < num_rows
    p = rows_ptr + r.to(tl.int64) * row_stride
    zero = (r * 0).to(tl.uint32)
    h0 = zero + _const(k_ptr, 64)  # H0[0]
    h1 = zero + _const(k_ptr, 65)  # H0[1]
    h2 = zero + _const(k_ptr, 66)  # H0[2]
    h3 = zero + _const(k_ptr, 67)  # H0[3]
    h4 = zero + _const(k_ptr, 68)  # H0[4]
    h5 = zero + _const(k_ptr, 69)  # H0[5]
    h6 = zero + _const(k_ptr, 70)  # H0[6]
    h7 = zero + _const(k_ptr, 71)  # H0[7]
    pad = _const(k_ptr, 72)
    bits = (num_words * 32).to(tl.uint32)
    num_blocks = (num_words + 2) // 16 + 1  # the data, the 0x80 word and the 64-bit length
    # the next block's words are loaded before the current block is compressed, so their
    # memory latency overlaps the 64 rounds
    n0, n1, n2, n3, n4, n5, n6, n7, n8, n9, n10, n11, n12, n13, n14, n15 = _block(
        p, 0, num_words, live, pad
    )
    for blk in range(num_blocks):
        w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13, w14, w15 = (
            n0, n1, n2, n3, n4, n5, n6, n7, n8, n9, n10, n11, n12, n13, n14, n15
        )
        n0, n1, n2, n3, n4, n5, n6, n7, n8, n9, n10, n11, n12, n13, n14, n15 = _block(
            p, blk + 1, num_words, live, pad
        )
        w15 = tl.where(blk == num_blocks - 1, zero + bits, w15)
        h0, h1, h2, h3, h4, h5, h6, h7 = _compress(
            h0, h1, h2, h3, h4, h5, h6, h7, w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11,
            w12, w13, w14, w15, k_ptr
        )
    out = out_ptr + r.to(tl.int64) * 8
    tl.store(out + 0, h0.to(tl.int32, bitcast=True), mask=live)
    tl.store(out + 1, h1.to(tl.int32, bitcast=True), mask=live)
    tl.store(out + 2, h2.to(tl.int32, bitcast=True), mask=live)
    tl.store(out + 3, h3.to(tl.int32, bitcast=True), mask=live)
    tl.store(out + 4, h4.to(tl.int32, bitcast=True), mask=live)
    tl.store(out + 5, h5.to(tl.int32, bitcast=True), mask=live)
    tl.store(out + 6, h6.to(tl.int32, bitcast=True), mask=live)
    tl.store(out + 7, h7.to(tl.int32, bitcast=True), mask=live)
