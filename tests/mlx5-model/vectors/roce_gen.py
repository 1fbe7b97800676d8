#!/usr/bin/env python3
"""Generate RoCE v2 frame vectors with scapy, an implementation independent of the model.

    python3 -m venv /tmp/scapy-venv && /tmp/scapy-venv/bin/pip install scapy
    /tmp/scapy-venv/bin/python tests/mlx5-model/vectors/roce_gen.py > tests/mlx5-model/vectors/roce-scapy.txt

Each frame is built from scapy layers: Ether (and Dot1Q), IP or IPv6 (scapy computes the
IPv4 header checksum), UDP to 4791 with checksum 0 (as rxe sends), and scapy.contrib.roce's
BTH, whose post_build computes the ICRC (contrib/roce.py `compute_icrc`: zlib crc32 over 8
bytes of 0xff and the masked IP/UDP/BTH headers and the rest, stored byte-reversed). The
extension headers, which contrib.roce does not define (it has only AETH), are packed here with
struct from their IBTA layouts, as Raw bytes after the BTH, followed by the payload and its pad.

Output: one block per vector, `key value` lines; the Rust test (src/roce/tests.rs) parses
every frame and checks each field and the ICRC. `expect` is `ok` or the check that must fail.
"""

import struct
import sys

from scapy.all import IP, UDP, Dot1Q, Ether, IPv6, Raw
from scapy.contrib.roce import BTH

RC, UC, UD = 0x00, 0x20, 0x60
OPS = {
    "SEND_FIRST": 0x00, "SEND_MIDDLE": 0x01, "SEND_LAST": 0x02, "SEND_LAST_IMM": 0x03,
    "SEND_ONLY": 0x04, "SEND_ONLY_IMM": 0x05, "WRITE_FIRST": 0x06, "WRITE_MIDDLE": 0x07,
    "WRITE_LAST": 0x08, "WRITE_LAST_IMM": 0x09, "WRITE_ONLY": 0x0A, "WRITE_ONLY_IMM": 0x0B,
    "READ_REQUEST": 0x0C, "READ_RESPONSE_FIRST": 0x0D, "READ_RESPONSE_MIDDLE": 0x0E,
    "READ_RESPONSE_LAST": 0x0F, "READ_RESPONSE_ONLY": 0x10, "ACKNOWLEDGE": 0x11,
    "ATOMIC_ACKNOWLEDGE": 0x12, "COMPARE_SWAP": 0x13, "FETCH_ADD": 0x14,
    "SEND_LAST_INV": 0x16, "SEND_ONLY_INV": 0x17,
}

# Extension headers per operation, in wire order (IBTA vol 1 9.2; rxe_opcode.c).
EXT = {
    "SEND_LAST_IMM": ["immdt"], "SEND_ONLY_IMM": ["immdt"],
    "WRITE_FIRST": ["reth"], "WRITE_ONLY": ["reth"], "WRITE_LAST_IMM": ["immdt"],
    "WRITE_ONLY_IMM": ["reth", "immdt"], "READ_REQUEST": ["reth"],
    "READ_RESPONSE_FIRST": ["aeth"], "READ_RESPONSE_LAST": ["aeth"],
    "READ_RESPONSE_ONLY": ["aeth"], "ACKNOWLEDGE": ["aeth"],
    "ATOMIC_ACKNOWLEDGE": ["aeth", "atomicack"], "COMPARE_SWAP": ["atomic"],
    "FETCH_ADD": ["atomic"], "SEND_LAST_INV": ["ieth"], "SEND_ONLY_INV": ["ieth"],
}
NO_PAYLOAD = {"READ_REQUEST", "ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE", "COMPARE_SWAP", "FETCH_ADD"}

MAC_A, MAC_B = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
V4 = ("192.168.10.1", "192.168.10.2")
V6 = ("fd00::1", "fd00:0:0:1::2")


class Gen:
    def __init__(self):
        self.n = 0
        self.seed = 0x2545F491

    def rnd(self, bits):
        # xorshift32, so the file is reproducible without Python's random module.
        x = self.seed
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        self.seed = x
        out = x
        while bits > 32:
            out = (out << 32) | self.rnd(32)
            bits -= 32
        return out & ((1 << bits) - 1)

    def vector(self, transport, op, v6, payload_len, vlan=None, expect="ok", mangle=None,
               aeth_syndrome=0x1F, flags=()):
        self.n += 1
        opcode = transport | OPS[op]
        name = "%s_%s_%s_%d" % ({RC: "RC", UC: "UC", UD: "UD"}[transport], op,
                                "v6" if v6 else "v4", payload_len)
        f = {}
        ext = list(EXT.get(op, []))
        if transport == UD:
            ext = ["deth"] + ext
        raw = b""
        for h in ext:
            if h == "reth":
                va, rkey, ln = self.rnd(64), self.rnd(32), self.rnd(31)
                raw += struct.pack("!QII", va, rkey, ln)
                f.update({"reth.va": va, "reth.rkey": rkey, "reth.len": ln})
            elif h == "aeth":
                msn = self.rnd(24)
                raw += struct.pack("!I", (aeth_syndrome << 24) | msn)
                f.update({"aeth.syndrome": aeth_syndrome, "aeth.msn": msn})
            elif h == "atomic":
                va, rkey, sw, cmp_ = self.rnd(61) << 3, self.rnd(32), self.rnd(64), self.rnd(64)
                raw += struct.pack("!QIQQ", va, rkey, sw, cmp_)
                f.update({"atomic.va": va, "atomic.rkey": rkey, "atomic.swap": sw,
                          "atomic.compare": cmp_})
            elif h == "atomicack":
                orig = self.rnd(64)
                raw += struct.pack("!Q", orig)
                f["atomicack.orig"] = orig
            elif h == "immdt":
                imm = self.rnd(32)
                raw += struct.pack("!I", imm)
                f["immdt"] = imm
            elif h == "ieth":
                rk = self.rnd(32)
                raw += struct.pack("!I", rk)
                f["ieth"] = rk
            elif h == "deth":
                qkey = 0x80010000 if self.n % 2 else self.rnd(31)
                sqp = self.rnd(24)
                raw += struct.pack("!II", qkey, sqp)
                f.update({"deth.qkey": qkey, "deth.srcqp": sqp})
        payload = bytes((self.rnd(8)) for _ in range(payload_len))
        pad = (-payload_len) % 4
        raw += payload + b"\x00" * pad

        se = "se" in flags
        mig = "mig" in flags
        fecn = "fecn" in flags
        becn = "becn" in flags
        ack = "ack" in flags
        dqpn = 1 if transport == UD and self.n % 3 == 0 else self.rnd(24)
        psn = self.rnd(24)
        pkey = 0xFFFF if self.n % 5 else 0x8001
        sport = 0xC000 | self.rnd(14)
        bth = BTH(opcode=opcode, solicited=se, migreq=mig, padcount=pad, version=0, pkey=pkey,
                  fecn=fecn, becn=becn, dqpn=dqpn, ackreq=ack, psn=psn)
        if mangle == "icrc":
            bth.icrc = 0x12345678
        tc, hop = self.rnd(8), 1 + self.rnd(7)
        if v6:
            flow = self.rnd(20)
            ip = IPv6(src=V6[0], dst=V6[1], tc=tc, fl=flow, hlim=hop)
            f.update({"ip.version": 6, "ip.src": V6[0], "ip.dst": V6[1], "ip.tc": tc,
                      "ip.flow": flow, "ip.hop": hop})
        else:
            ident = self.rnd(16)
            ip = IP(src=V4[0], dst=V4[1], tos=tc, ttl=hop, id=ident, flags="DF")
            if mangle == "ipcsum":
                ip.chksum = 0x1234
            f.update({"ip.version": 4, "ip.src": V4[0], "ip.dst": V4[1], "ip.tc": tc,
                      "ip.hop": hop, "ip.id": ident})
        eth = Ether(dst=MAC_B, src=MAC_A)
        if vlan is not None:
            eth = eth / Dot1Q(prio=vlan[0], vlan=vlan[1])
            f["eth.vlan"] = "%d/%d" % vlan
        pkt = eth / ip / UDP(sport=sport, dport=4791, chksum=0) / bth / Raw(raw)
        frame = bytes(pkt)
        f.update({"eth.dst": MAC_B, "eth.src": MAC_A, "udp.sport": sport, "bth.opcode": opcode,
                  "bth.se": int(se), "bth.mig": int(mig), "bth.pad": pad, "bth.pkey": pkey,
                  "bth.fecn": int(fecn), "bth.becn": int(becn), "bth.destqp": dqpn,
                  "bth.ackreq": int(ack), "bth.psn": psn, "payload.len": payload_len,
                  "icrc": frame[-4:].hex()})
        out = ["vector %s_%d" % (name, self.n), "expect %s" % expect, "frame %s" % frame.hex()]
        for k in sorted(f):
            v = f[k]
            out.append("%s %s" % (k, ("0x%x" % v) if isinstance(v, int) else v))
        out.append("payload %s" % (payload.hex() or "-"))
        out.append("end")
        return "\n".join(out)


def main():
    g = Gen()
    blocks = []
    sizes = [0, 1, 2, 3, 4, 5, 63, 256]
    for v6 in (False, True):
        for t, ops in ((RC, OPS), (UC, [o for o in OPS if OPS[o] <= 0x0B]),
                       (UD, ["SEND_ONLY", "SEND_ONLY_IMM"])):
            for i, op in enumerate(ops):
                plen = 0 if op in NO_PAYLOAD else sizes[(i + v6) % len(sizes)]
                flags = [("se", "ack"), ("mig",), ("fecn",), ("becn", "ack"), ()][i % 5]
                blocks.append(g.vector(t, op, v6, plen, flags=flags))
        # ACK syndromes: ACK, RNR NAK, each NAK code.
        for syn in (0x00, 0x1F, 0x21, 0x3F, 0x60, 0x61, 0x62, 0x63):
            blocks.append(g.vector(RC, "ACKNOWLEDGE", v6, 0, aeth_syndrome=syn))
        # Full-MTU payloads, a tagged frame, a jumbo-sized one.
        blocks.append(g.vector(RC, "WRITE_MIDDLE", v6, 1024, flags=("ack",)))
        blocks.append(g.vector(RC, "SEND_FIRST", v6, 1024, vlan=(3, 100)))
        blocks.append(g.vector(RC, "READ_RESPONSE_ONLY", v6, 4096))
        blocks.append(g.vector(UD, "SEND_ONLY", v6, 1024, vlan=(0, 4094)))
        # Frames that must fail, and the check that catches them.
        blocks.append(g.vector(RC, "SEND_ONLY", v6, 7, expect="icrc", mangle="icrc"))
        blocks.append(g.vector(RC, "WRITE_ONLY", v6, 8, expect="icrc", mangle="icrc"))
    blocks.append(g.vector(RC, "SEND_ONLY", False, 9, expect="ipv4 checksum", mangle="ipcsum"))
    sys.stdout.write("# RoCE v2 frames built with scapy %s (contrib.roce computes the ICRC).\n"
                     % __import__("scapy").VERSION)
    sys.stdout.write("# Generated by roce_gen.py; %d vectors. Do not edit.\n" % len(blocks))
    sys.stdout.write("\n\n".join(blocks) + "\n")


if __name__ == "__main__":
    main()
