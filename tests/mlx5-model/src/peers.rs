//! What the peer programs of the `wire` tier say out of band, before and after they talk RoCE:
//! the TCP exchange of rdma-core's pingpong examples, and the line and plan of the project's C
//! verbs peer (`examples/c/wire_peer.c`). Test support, not device behaviour: the model's and
//! the driver's wire tests both speak these, so each format is written down once.

/// rdma-core's `ibv_rc_pingpong` / `ibv_ud_pingpong` exchange (`libibverbs/examples/*_pingpong.c`,
/// `pp_client_exch_dest` / `pp_server_exch_dest`): each side writes
/// `"%04x:%06x:%06x:%s"` (LID, QPN, PSN, the GID's 16 bytes as 32 hex digits in byte order,
/// `gid_to_wire_gid`) with its NUL, 52 bytes; the client then writes `"done"` and its NUL.
pub mod pingpong {
    /// Bytes of one message, the NUL included (`sizeof "0000:000000:000000:" + 32 digits`).
    pub const MSG_LEN: usize = 52;
    /// The client's last word.
    pub const DONE: &[u8; 5] = b"done\0";
    /// The programs' default TCP port.
    pub const PORT: u16 = 18515;

    /// One side's address.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Dest {
        /// LID (0 on RoCE).
        pub lid: u16,
        /// QP number (24 bits).
        pub qpn: u32,
        /// First PSN (24 bits).
        pub psn: u32,
        /// GID.
        pub gid: [u8; 16],
    }

    impl Dest {
        /// The 52-byte message.
        pub fn to_msg(&self) -> [u8; MSG_LEN] {
            let hex: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
            let s = format!(
                "{:04x}:{:06x}:{:06x}:{hex}",
                self.lid,
                self.qpn & 0xff_ffff,
                self.psn & 0xff_ffff
            );
            let mut m = [0u8; MSG_LEN];
            m[..s.len()].copy_from_slice(s.as_bytes());
            m
        }

        /// Parse a message; `None` if it is not one.
        pub fn parse(m: &[u8; MSG_LEN]) -> Option<Dest> {
            let s = std::str::from_utf8(&m[..MSG_LEN - 1]).ok()?;
            let f: Vec<&str> = s.split(':').collect();
            let [lid, qpn, psn, g] = f[..] else { return None };
            if g.len() != 32 || m[MSG_LEN - 1] != 0 {
                return None;
            }
            let mut gid = [0u8; 16];
            for (i, b) in gid.iter_mut().enumerate() {
                *b = u8::from_str_radix(&g[2 * i..2 * i + 2], 16).ok()?;
            }
            Some(Dest {
                lid: u16::from_str_radix(lid, 16).ok()?,
                qpn: u32::from_str_radix(qpn, 16).ok()?,
                psn: u32::from_str_radix(psn, 16).ok()?,
                gid,
            })
        }
    }
}

/// The project's C verbs peer (`examples/c/wire_peer.c`): its exchange line and the plan both
/// sides follow. Any change here is a change there.
pub mod wire_peer {
    /// Bytes of the target's data area.
    pub const DATA_LEN: usize = 1 << 20;
    /// Offset of the atomics' 8 bytes.
    pub const ATOMIC_OFF: usize = DATA_LEN;
    /// Bytes the target registers.
    pub const REGION_LEN: usize = DATA_LEN + 64;
    /// Bytes of each receive the target posts.
    pub const RECV_SLOT: usize = 4096;
    /// The atomics word before the plan.
    pub const ATOMIC_INIT: u64 = 0x1000;
    /// The atomics word after it: FAA +5, CAS (0x1005 → 0xdeadbeef), FAA +1.
    pub const ATOMIC_FINAL: u64 = 0xdead_bef0;
    /// The WRITE with immediate's immediate.
    pub const IMM_VALUE: u32 = 0x1234_5678;
    /// Where the WRITE with immediate goes, and how long it is.
    pub const IMM_WRITE: (usize, usize) = (100, 16);
    /// WRITE (and READ back) pieces tiling the data; the last one takes the rest.
    pub const PIECES: [usize; 9] = [1, 7, 64, 1000, 1024, 1025, 4096, 12345, 65536];
    /// SEND sizes, one receive each; then one receive for the WRITE with immediate.
    pub const SENDS: [usize; 5] = [1, 100, 1024, 1025, 4096];
    /// The default TCP port.
    pub const PORT: u16 = 18600;

    /// Byte `i` of the pattern for `seed` (`pattern` in the C file).
    pub fn pattern(seed: u32, i: u64) -> u8 {
        (i.wrapping_mul(131).wrapping_add(u64::from(seed) * 7).wrapping_add(i >> 8)) as u8
    }

    /// The pieces as (offset, length), covering `0..DATA_LEN`.
    pub fn pieces() -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut off = 0;
        for &l in &PIECES {
            out.push((off, l));
            off += l;
        }
        out.push((off, DATA_LEN - off));
        out
    }

    /// One side's line: `"QPN PSN GID ADDR RKEY LEN\n"`, hex, the GID in byte order.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Dest {
        /// QP number.
        pub qpn: u32,
        /// First PSN.
        pub psn: u32,
        /// GID.
        pub gid: [u8; 16],
        /// Address of the exposed region.
        pub addr: u64,
        /// Its rkey.
        pub rkey: u32,
        /// Its length.
        pub len: u32,
    }

    impl Dest {
        /// The line, newline included.
        pub fn line(&self) -> String {
            let hex: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
            format!(
                "{:06x} {:06x} {hex} {:016x} {:08x} {:08x}\n",
                self.qpn, self.psn, self.addr, self.rkey, self.len
            )
        }

        /// Parse a line; `None` if it is not one.
        pub fn parse(line: &str) -> Option<Dest> {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [qpn, psn, g, addr, rkey, len] = f[..] else { return None };
            if g.len() != 32 {
                return None;
            }
            let mut gid = [0u8; 16];
            for (i, b) in gid.iter_mut().enumerate() {
                *b = u8::from_str_radix(&g[2 * i..2 * i + 2], 16).ok()?;
            }
            Some(Dest {
                qpn: u32::from_str_radix(qpn, 16).ok()?,
                psn: u32::from_str_radix(psn, 16).ok()?,
                gid,
                addr: u64::from_str_radix(addr, 16).ok()?,
                rkey: u32::from_str_radix(rkey, 16).ok()?,
                len: u32::from_str_radix(len, 16).ok()?,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pingpong_message_as_the_c_formats_it() {
        let gid = std::net::Ipv4Addr::new(10, 3, 0, 2).to_ipv6_mapped().octets();
        let d = pingpong::Dest { lid: 0, qpn: 0x11, psn: 0xcee9ee, gid };
        let m = d.to_msg();
        assert_eq!(&m[..51], b"0000:000011:cee9ee:00000000000000000000ffff0a030002");
        assert_eq!(m[51], 0);
        assert_eq!(pingpong::Dest::parse(&m), Some(d));
        let mut bad = m;
        bad[20] = b'g';
        assert_eq!(pingpong::Dest::parse(&bad), None);
    }

    #[test]
    fn wire_peer_line_round_trips_and_the_pieces_tile_the_data() {
        let d = wire_peer::Dest {
            qpn: 0x12,
            psn: 0xabcdef,
            gid: [7; 16],
            addr: 0x7f00_1000,
            rkey: 0x1234,
            len: 0x100040,
        };
        let l = d.line();
        assert_eq!(
            l,
            "000012 abcdef 07070707070707070707070707070707 000000007f001000 00001234 00100040\n"
        );
        assert_eq!(wire_peer::Dest::parse(&l), Some(d));
        let p = wire_peer::pieces();
        assert_eq!(p.first(), Some(&(0, 1)));
        let (off, len) = *p.last().unwrap();
        assert_eq!(off + len, wire_peer::DATA_LEN);
        assert!(p.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0));
        // The C file's pattern for two sample bytes, computed by hand: (i*131 + seed*7 + i>>8) & 0xff.
        assert_eq!(wire_peer::pattern(1, 0), 7);
        assert_eq!(wire_peer::pattern(1, 300), ((300 * 131 + 7 + 1) & 0xff) as u8);
    }
}

/// The wire tier's guest as its tests see it (`xtask/src/tiers/wire.rs` sets it up): the
/// environment naming the wire and the peer's namespace, and running the peer programs there.
pub mod guest {
    use std::net::{Ipv4Addr, TcpStream};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use rdma_pmd::Mac;

    /// The longest wait for the peer: its program starting, its GID appearing.
    pub const PATIENCE: Duration = Duration::from_secs(60);

    /// An environment variable the tier sets.
    pub fn env(k: &str) -> String {
        std::env::var(k)
            .unwrap_or_else(|_| panic!("{k} not set (run by `cargo xtask test --tier wire`)"))
    }

    /// An IPv4 address from the environment.
    pub fn ip(k: &str) -> Ipv4Addr {
        env(k).parse().unwrap_or_else(|e| panic!("{k}: {e}"))
    }

    /// The peer's namespace name (`WIRE_PEER_NETNS` is its `/run/netns/` path).
    pub fn netns() -> String {
        env("WIRE_PEER_NETNS").rsplit('/').next().unwrap_or_default().to_string()
    }

    /// The MAC of `dev` in the peer's namespace.
    pub fn peer_mac(dev: &str) -> Mac {
        let out = Command::new("ip")
            .args(["-n", &netns(), "-o", "link", "show", dev])
            .output()
            .expect("ip link show");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let hex = text.split_whitespace().skip_while(|w| *w != "link/ether").nth(1).expect("a MAC");
        let mut m = [0u8; 6];
        for (i, b) in hex.split(':').enumerate().take(6) {
            m[i] = u8::from_str_radix(b, 16).expect("hex");
        }
        Mac(m)
    }

    /// The index of `gid` in rxe device `dev`'s GID table, waiting for it to appear.
    pub fn gid_index(dev: &str, gid: &[u8; 16]) -> u32 {
        let want: Vec<String> =
            gid.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect();
        let want = want.join(":");
        let dir = format!("/sys/class/infiniband/{dev}/ports/1/gids");
        let end = Instant::now() + PATIENCE;
        while Instant::now() < end {
            for e in std::fs::read_dir(&dir).expect("the GID table").flatten() {
                if std::fs::read_to_string(e.path()).unwrap_or_default().trim() == want {
                    return e.file_name().to_string_lossy().parse().expect("an index");
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{want} not in {dir}");
    }

    /// Start a program in the peer's namespace, its output captured.
    pub fn spawn_in_peer(args: &[&str]) -> Child {
        Command::new("ip")
            .args(["netns", "exec", &netns()])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// Wait for a peer program; fail unless it exited 0 (its output shown either way).
    pub fn finish(child: Child, what: &str) {
        let out = child.wait_with_output().expect("wait for the peer");
        let (o, e) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        eprintln!("{what}: {}\n{o}{e}", out.status);
        assert!(out.status.success(), "{what} failed: {o}{e}");
    }

    /// Connect to a peer program's TCP port on the control link, retrying while it starts.
    pub fn connect_ctl(port: u16) -> TcpStream {
        let addr = format!("{}:{port}", env("WIRE_CTL_PEER"));
        let end = Instant::now() + PATIENCE;
        loop {
            match TcpStream::connect(&addr) {
                Ok(s) => return s,
                Err(e) if Instant::now() >= end => panic!("connect {addr}: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}
