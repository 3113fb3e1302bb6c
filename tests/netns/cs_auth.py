# SPDX-License-Identifier: MIT
"""collstack packet tags in plain Python (docs/auth.md), written from the
SipHash paper, FIPS 197 (AES), NIST SP 800-38D (GCM) and libsodium's
crypto_kdf documentation, independently of control/auth.c: the netns tests
forge and tag frames with it, and tests/ctrlplane/test_auth.c checks its
known answers against the C code."""
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


# ---- AES-256 (FIPS 197), encryption only ------------------------------

def _xt(a):
    return ((a << 1) ^ 0x1b) & 0xff if a & 0x80 else a << 1


def _sbox():
    sb = [0] * 256
    p = q = 1
    while True:	# p runs over GF(2^8)*, q = 1/p (FIPS 197, 5.1.1)
        p = p ^ _xt(p)
        q ^= q << 1
        q ^= q << 2
        q ^= q << 4
        q &= 0xff
        if q & 0x80:
            q ^= 0x09
        x = q ^ ((q << 1 | q >> 7) & 0xff) ^ ((q << 2 | q >> 6) & 0xff) \
            ^ ((q << 3 | q >> 5) & 0xff) ^ ((q << 4 | q >> 4) & 0xff)
        sb[p] = x ^ 0x63
        if p == 1:
            break
    sb[0] = 0x63
    return sb


_SBOX = _sbox()


def _expand(key):
    """the 15 round keys of AES-256, 16 bytes each"""
    w = [list(key[i:i + 4]) for i in range(0, 32, 4)]
    rcon = 1
    for i in range(8, 60):
        t = list(w[i - 1])
        if i % 8 == 0:
            t = [_SBOX[b] for b in t[1:] + t[:1]]
            t[0] ^= rcon
            rcon = _xt(rcon)
        elif i % 8 == 4:
            t = [_SBOX[b] for b in t]
        w.append([a ^ b for a, b in zip(w[i - 8], t)])
    return [sum(w[4 * r:4 * r + 4], []) for r in range(15)]


def aes256_encrypt(rk, block):
    """one block; rk from _expand()"""
    s = [b ^ k for b, k in zip(block, rk[0])]
    for r in range(1, 15):
        s = [_SBOX[b] for b in s]
        # ShiftRows: byte (row i, column c) is s[4c + i]
        s = [s[4 * ((c + i) % 4) + i] for c in range(4) for i in range(4)]
        if r != 14:
            m = []
            for c in range(4):
                a = s[4 * c:4 * c + 4]
                t = a[0] ^ a[1] ^ a[2] ^ a[3]
                m += [a[i] ^ t ^ _xt(a[i] ^ a[(i + 1) % 4]) for i in range(4)]
            s = m
        s = [b ^ k for b, k in zip(s, rk[r])]
    return bytes(s)


# ---- GCM (NIST SP 800-38D) with no plaintext: GMAC -----------------------

_R = 0xe1 << 120


def _gmul(x, y):
    """x * y in GF(2^128), GCM's bit order (SP 800-38D, 6.3)"""
    z, v = 0, y
    for i in range(127, -1, -1):
        if (x >> i) & 1:
            z ^= v
        v = (v >> 1) ^ _R if v & 1 else v >> 1
    return z


def gmac(key, iv, aad):
    """the GCM tag of (iv, aad, empty plaintext) under AES-256 key"""
    rk = _expand(key)
    h = int.from_bytes(aes256_encrypt(rk, bytes(16)), "big")
    y = 0
    pad = aad + bytes(-len(aad) % 16)
    for i in range(0, len(pad), 16):
        y = _gmul(y ^ int.from_bytes(pad[i:i + 16], "big"), h)
    y = _gmul(y ^ (len(aad) * 8 << 64), h)
    j0 = iv + b"\0\0\0\1"	# a 96-bit IV
    return (int.from_bytes(aes256_encrypt(rk, j0), "big") ^ y).to_bytes(
        16, "big")


def gmac_epoch_key(token, group, epoch):
    """G(epoch): the GMAC tags' key of one group epoch"""
    return subkey(token, (group << 32) | epoch, b"csgmac01")


def gmac_sender_key(ekey, src, sid):
    """K(src, sid) = BLAKE2b-256(key = G(epoch), be16(src) || sid)"""
    return hashlib.blake2b(struct.pack(">H", src) + sid, digest_size=32,
                           key=ekey).digest()


def gmac_tag(ekey, fields, payload, nonce):
    """fields as tag()'s (fields[3] is src); nonce: sid (12) || be32(ctr)"""
    k = gmac_sender_key(ekey, fields[3], nonce[:12])
    msg = b"".join(struct.pack(">Q", f) for f in fields)
    return gmac(k, bytes(8) + nonce[12:16], msg + payload)


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
    # the AES of FIPS 197 (appendix C.3) and the GCM of SP 800-38D's
    # test case 13 (AES-256, key 0, IV 0, nothing to authenticate)
    assert aes256_encrypt(_expand(bytes(range(32))), bytes.fromhex(
        "00112233445566778899aabbccddeeff")).hex() == \
        "8ea2b7ca516745bfeafc49904b496089"
    assert gmac(bytes(32), bytes(12), b"").hex() == \
        "530f8afbc74536b9a963b4f1c4cb738b"
    g = gmac_epoch_key(b"job-token", 7, 2)
    print(g.hex())
    nonce = bytes(range(0xa0, 0xac)) + struct.pack(">I", 5)
    f[13] = 64
    f[2] = 4 | 0x80
    print(gmac_tag(g, f, bytes(range(64)), nonce).hex())
    f[13] = 0
    print(gmac_tag(g, f, b"", nonce).hex())
