//! An `AF_PACKET` raw socket bound to one interface (packet(7)): the model's frames on a
//! real Linux wire — an Ethernet NIC, a veth pair, or `lo`.
//!
//! The socket is `SOCK_RAW` (frames from the destination MAC on, the kernel adds no header
//! and no FCS is seen), non-blocking, close-on-exec. It is created with protocol 0, which
//! receives nothing, and only then bound to the interface and the EtherType (or all of them),
//! so no frame of another interface slips in before the bind (packet(7), "protocol").
//! Frames the host sends out of the interface are also shown to every packet socket on it,
//! marked `PACKET_OUTGOING` (`linux/if_packet.h`); those are not frames the wire delivered,
//! so [`Port::recv`] skips them (and counts them).
//!
//! Opening one needs `CAP_NET_RAW`.

// The FFI calls below are the only unsafe code of the crate; each says why it is sound.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::{Port, PortError};
use crate::roce::ethernet;

/// `PACKET_OUTGOING`, `sll_pkttype` of a frame this host sent (`linux/if_packet.h`).
const PACKET_OUTGOING: u8 = 4;
/// The receive buffer: the largest frame a packet socket can hand over (64 KiB, as a
/// loopback MTU allows).
const RECV_BUF: usize = 65536 + 64;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn zeroed_sll() -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is a C struct of integers and an integer array; all zeros is a
    // valid value of it.
    unsafe { std::mem::zeroed() }
}

/// An `AF_PACKET` socket bound to a named interface.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: u32,
    buf: Vec<u8>,
    outgoing_skipped: u64,
}

impl PacketSocket {
    /// Open a socket on interface `ifname` that receives frames of `ethertype` (all
    /// EtherTypes if `None`).
    pub fn open(ifname: &str, ethertype: Option<u16>) -> Result<PacketSocket, PortError> {
        let proto = ethertype.unwrap_or(libc::ETH_P_ALL as u16).to_be();
        let name = CString::new(ifname).map_err(|_| PortError::NoInterface)?;
        // SAFETY: if_nametoindex reads the NUL-terminated string `name` owns and keeps no
        // pointer to it.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(PortError::NoInterface);
        }
        let ty = libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
        // SAFETY: socket(2) takes no pointers.
        let raw = unsafe { libc::socket(libc::AF_PACKET, ty, 0) };
        if raw < 0 {
            return Err(PortError::Io { op: "socket(AF_PACKET)", errno: errno() });
        }
        // SAFETY: `raw` is a descriptor socket(2) just returned, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut sll = zeroed_sll();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: bind reads `size_of::<sockaddr_ll>()` bytes from `sll`, which outlives the
        // call; the kernel keeps no pointer to it.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast::<libc::sockaddr>(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(PortError::Io { op: "bind(AF_PACKET)", errno: errno() });
        }
        Ok(PacketSocket { fd, ifindex, buf: vec![0; RECV_BUF], outgoing_skipped: 0 })
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Frames this host sent out of the interface that `recv` passed over.
    pub fn outgoing_skipped(&self) -> u64 {
        self.outgoing_skipped
    }
}

impl Port for PacketSocket {
    fn send(&mut self, frame: &[u8]) -> Result<(), PortError> {
        if frame.len() < ethernet::HEADER_LEN {
            return Err(PortError::Runt { len: frame.len() });
        }
        // SAFETY: send reads `frame.len()` bytes from `frame`, which outlives the call.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 {
            let e = errno();
            if e == libc::EMSGSIZE {
                return Err(PortError::TooLong { len: frame.len(), max: 0 });
            }
            return Err(PortError::Io { op: "send", errno: e });
        }
        if n as usize != frame.len() {
            return Err(PortError::Io { op: "send (short)", errno: libc::EMSGSIZE });
        }
        Ok(())
    }

    fn recv(&mut self) -> Result<Option<Vec<u8>>, PortError> {
        loop {
            let mut from = zeroed_sll();
            let mut from_len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: recvfrom writes at most `buf.len()` bytes into `buf` and at most
            // `from_len` bytes into `from`; both outlive the call. MSG_TRUNC makes it return
            // the frame's real length, which is compared with the buffer below.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                    (&mut from as *mut libc::sockaddr_ll).cast::<libc::sockaddr>(),
                    &mut from_len,
                )
            };
            if n < 0 {
                let e = errno();
                if e == libc::EAGAIN || e == libc::EWOULDBLOCK {
                    return Ok(None);
                }
                if e == libc::EINTR {
                    continue;
                }
                return Err(PortError::Io { op: "recvfrom", errno: e });
            }
            if from.sll_pkttype == PACKET_OUTGOING {
                self.outgoing_skipped += 1;
                continue;
            }
            let n = n as usize;
            if n > self.buf.len() {
                return Err(PortError::TooLong { len: n, max: self.buf.len() });
            }
            return Ok(Some(self.buf[..n].to_vec()));
        }
    }
}

#[cfg(test)]
mod tests {
    //! Real sockets. These run where the process has `CAP_NET_RAW` (root, usually) and say
    //! loudly on stderr when they cannot; where the capability is there, a failure fails.

    use std::process::Command;
    use std::time::{Duration, Instant};

    use rdma_pmd::Mac;

    use super::*;
    use crate::roce::packet::{bth, IpRepr, RocePacket, RoceRepr};
    use crate::roce::{bth::Opcode, ext::ExtRepr};

    /// IEEE 802 "local experimental" EtherType 1: no protocol of the host answers it.
    const TEST_ETHERTYPE: u16 = 0x88b5;

    /// Bit `cap` of the effective capability set (`CapEff` in /proc/self/status).
    fn has_cap(cap: u32) -> bool {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|bits| bits & (1 << cap) != 0)
    }
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_NET_RAW: u32 = 13;

    fn expected_to_work(what: &str) -> bool {
        if std::env::var_os("RDMA_PMD_NO_AF_PACKET").is_some() {
            eprintln!("*** NOT RUN: {what}: RDMA_PMD_NO_AF_PACKET is set ***");
            return false;
        }
        if !has_cap(CAP_NET_RAW) {
            eprintln!("*** NOT RUN: {what}: no CAP_NET_RAW (run as root to test AF_PACKET) ***");
            return false;
        }
        true
    }

    fn frame(dst: Mac, src: Mac, ethertype: u16, body: &[u8]) -> Vec<u8> {
        let mut f = Vec::with_capacity(14 + body.len());
        f.extend_from_slice(&dst.0);
        f.extend_from_slice(&src.0);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(body);
        f
    }

    /// Receive on `rx` until `want` arrives (other frames of the same type are skipped), for
    /// up to two seconds.
    fn await_frame(rx: &mut PacketSocket, want: &[u8]) -> bool {
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            match rx.recv().expect("recv") {
                Some(f) if f == want => return true,
                Some(_) => {}
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        false
    }

    fn nonce() -> Vec<u8> {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        let mut v = b"rdma-pmd mlx5-model AF_PACKET test ".to_vec();
        v.extend_from_slice(&std::process::id().to_be_bytes());
        v.extend_from_slice(&t.to_be_bytes());
        v.resize(64, 0);
        v
    }

    #[test]
    fn loopback_carries_a_frame_of_a_unique_ethertype() {
        if !expected_to_work("AF_PACKET on lo") {
            return;
        }
        let mut rx = PacketSocket::open("lo", Some(TEST_ETHERTYPE)).expect("AF_PACKET on lo");
        let mut tx = PacketSocket::open("lo", Some(TEST_ETHERTYPE)).expect("AF_PACKET on lo");
        // A socket for every EtherType also sees what the host sends (PACKET_OUTGOING).
        let mut all = PacketSocket::open("lo", None).expect("AF_PACKET on lo");
        assert!(rx.ifindex() > 0);
        // Non-blocking: nothing waiting (or only strangers' frames) returns at once.
        let t = Instant::now();
        while rx.recv().unwrap().is_some() {}
        assert!(t.elapsed() < Duration::from_secs(1));
        let f = frame(Mac([2, 0, 0, 0, 0, 2]), Mac([2, 0, 0, 0, 0, 1]), TEST_ETHERTYPE, &nonce());
        tx.send(&f).expect("send on lo");
        assert!(await_frame(&mut rx, &f), "the frame sent on lo did not come back");
        assert!(await_frame(&mut all, &f), "an ETH_P_ALL socket did not see it either");
        // The outgoing copy came first and was passed over; a protocol-bound socket is not
        // shown outgoing frames at all (the kernel taps only ETH_P_ALL sockets on transmit).
        assert!(all.outgoing_skipped() >= 1);
        assert_eq!(rx.outgoing_skipped(), 0);
        assert_eq!(tx.send(&[0; 5]), Err(PortError::Runt { len: 5 }));
    }

    #[test]
    fn unknown_interface_is_a_typed_error() {
        let e = PacketSocket::open("no-such-if0", None).unwrap_err();
        assert_eq!(e, PortError::NoInterface);
    }

    /// A veth pair named after this process, deleted on drop.
    struct Veth(String);

    impl Veth {
        fn create() -> Result<(Veth, String, String), String> {
            let base = format!("rpm{}", std::process::id() % 100_000);
            let (a, b) = (format!("{base}a"), format!("{base}b"));
            let ip = |args: &[&str]| -> Result<(), String> {
                let out = Command::new("ip").args(args).output().map_err(|e| e.to_string())?;
                if out.status.success() {
                    Ok(())
                } else {
                    Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
                }
            };
            ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
            let v = Veth(a.clone());
            ip(&["link", "set", &a, "up"])?;
            ip(&["link", "set", &b, "up"])?;
            Ok((v, a, b))
        }
    }

    impl Drop for Veth {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["link", "del", &self.0]).output();
        }
    }

    #[test]
    fn a_roce_frame_crosses_a_veth_pair_byte_for_byte() {
        if !expected_to_work("AF_PACKET over veth") {
            return;
        }
        if !has_cap(CAP_NET_ADMIN) {
            eprintln!("*** NOT RUN: AF_PACKET over veth: no CAP_NET_ADMIN to create one ***");
            return;
        }
        let (_veth, a, b) = match Veth::create() {
            Ok(v) => v,
            Err(e) => {
                // The kernel may lack veth (or `ip` be missing): the environment, not the code.
                eprintln!("*** NOT RUN: AF_PACKET over veth: cannot create a veth pair: {e} ***");
                return;
            }
        };
        let mut tx = PacketSocket::open(&a, Some(0x0800)).expect("AF_PACKET on veth");
        let mut rx = PacketSocket::open(&b, Some(0x0800)).expect("AF_PACKET on veth");
        let ip = IpRepr::between(ipv4_gid([10, 0, 0, 1]), ipv4_gid([10, 0, 0, 2]), 0, 64);
        let repr = RoceRepr {
            dst_mac: Mac([2, 0, 0, 0, 0, 2]),
            src_mac: Mac([2, 0, 0, 0, 0, 1]),
            vlan: None,
            ip,
            udp_src_port: 0xc123,
            bth: bth(Opcode::RC_SEND_ONLY, 0x11, 7),
            ext: ExtRepr::default(),
        };
        let f = repr.to_frame(&nonce()).unwrap();
        // The link may take a moment to come up: resend until the frame arrives.
        let mut ok = false;
        for _ in 0..10 {
            tx.send(&f).expect("send on veth");
            if await_frame(&mut rx, &f) {
                ok = true;
                break;
            }
        }
        assert!(ok, "the RoCE frame did not cross {a} → {b}");
        let p = RocePacket::parse(&f).unwrap();
        assert_eq!(p.bth.psn, 7);
    }

    fn ipv4_gid(a: [u8; 4]) -> [u8; 16] {
        std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets()
    }
}
