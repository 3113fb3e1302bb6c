# SPDX-License-Identifier: MIT
"""collstack packet tags in plain Python (docs/auth.md), written from the
SipHash paper and libsodium's crypto_kdf documentation, independently of
control/auth.c: the netns tests forge and tag frames with it, and
tests/ctrlplane/test_auth.c checks its known answers against the C code."""
import hashlib
import struct

M = (1 << 64) - 1


def _rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & M


def siphash128(key, msg):
    """SipHash-2-4 with a 128-bit output (libsodium's siphashx24)."""
    k0, k1 = struct.unpack("<QQ", key)
    v = [k0 ^ 0x736f6d6570736575, k1 ^ 0x646f72616e646f6d ^ 0xee,
         k0 ^ 0x6c7967656e657261, k1 ^ 0x7465646279746573]

    def rnd():
        v[0] = (v[0] + v[1]) & M; v[1] = _rotl(v[1], 13) ^ v[0]
        v[0] = _rotl(v[0], 32)
        v[2] = (v[2] + v[3]) & M; v[3] = _rotl(v[3], 16) ^ v[2]
        v[0] = (v[0] + v[3]) & M; v[3] = _rotl(v[3], 21) ^ v[0]
        v[2] = (v[2] + v[1]) & M; v[1] = _rotl(v[1], 17) ^ v[2]
        v[2] = _rotl(v[2], 32)

    n = len(msg)
    end = n - n % 8
    for i in range(0, end, 8):
        m, = struct.unpack_from("<Q", msg, i)
        v[3] ^= m; rnd(); rnd(); v[0] ^= m
    b = (n & 0xff) << 56
    for i, c in enumerate(msg[end:]):
        b |= c << (8 * i)
    v[3] ^= b; rnd(); rnd(); v[0] ^= b
    v[2] ^= 0xee
    for _ in range(4):
        rnd()
    o1 = v[0] ^ v[1] ^ v[2] ^ v[3]
    v[1] ^= 0xdd
    for _ in range(4):
        rnd()
    return struct.pack("<QQ", o1, v[0] ^ v[1] ^ v[2] ^ v[3])


def subkey(token, sid, ctx):
    """crypto_kdf_derive_from_key(32, sid, ctx, BLAKE2b-256(token))"""
    master = hashlib.blake2b(token, digest_size=32).digest()
    return hashlib.blake2b(b"", digest_size=32, key=master,
                           salt=struct.pack("<Q", sid) + bytes(8),
                           person=ctx + bytes(8)).digest()


def epoch_key(token, group, epoch):
    """the packet key of one group epoch"""
    return subkey(token, (group << 32) | epoch, b"csepoch1")


def mac(token, ctx, data):
    """the control plane's MAC (cs_mac): keyed BLAKE2b-256 under the
    token's subkey 0 for purpose ctx ("csjoin01", "csetcd01")"""
    return hashlib.blake2b(data, digest_size=32,
                           key=subkey(token, 0, ctx)).digest()


def tag(key, fields, payload):
    """fields: the 17 header fields in the tag's order (docs/auth.md)."""
    msg = b"".join(struct.pack(">Q", f) for f in fields)
    if payload:
        msg += siphash128(key[16:], payload)
    return siphash128(key[:16], msg)


if __name__ == "__main__":
    # the known answers of tests/ctrlplane/test_auth.c
    print(siphash128(bytes(range(16)), b"").hex())
    k = epoch_key(b"job-token", 7, 2)
    print(k.hex())
    f = [1, 1, 4, 3, 0, 7, 2, 99, 0, 12345, 0, 0, 4096, 64, 0, 1000, 0]
    print(tag(k, f, bytes(range(64))).hex())
    f[13] = 0
    print(tag(k, f, b"").hex())
    print(mac(b"job-token", b"csjoin01", b"cs-join" + bytes(range(64))).hex())
    print(mac(b"job-token", b"csetcd01", b"cs-join" + bytes(range(64))).hex())
