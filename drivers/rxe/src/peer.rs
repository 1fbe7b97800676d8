//! The C interop peer (`c/peer.c`): an ordinary librdmacm program, for tests and examples that
//! check this backend against rdma-core's own posting path.

use core::ffi::c_void;
use std::ffi::CString;
use std::sync::mpsc::Sender;

use rdma_pmd::{Errno, Error, Result};

use crate::ffi;

/// Private data the peer's target sends on accept: where to write. Host byte order (both ends
/// run on the same host ABI).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetInfo {
    /// Buffer address in the target's key space.
    pub addr: u64,
    /// Its remote key.
    pub rkey: u32,
    /// Its length in bytes.
    pub len: u32,
}

impl TargetInfo {
    /// Encoded size.
    pub const LEN: usize = 16;

    /// The 16 bytes `c/peer.c`'s `struct rxe_peer_target_info` has.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.addr.to_ne_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_ne_bytes());
        b[12..].copy_from_slice(&self.len.to_ne_bytes());
        b
    }

    /// Decode private data (it may carry transport padding after the 16 bytes).
    pub fn from_bytes(b: &[u8]) -> Result<TargetInfo> {
        if b.len() < Self::LEN {
            return Err(Error::InvalidArgument("private data shorter than a target info"));
        }
        Ok(TargetInfo {
            addr: u64::from_ne_bytes(b[..8].try_into().expect("8 bytes")),
            rkey: u32::from_ne_bytes(b[8..12].try_into().expect("4 bytes")),
            len: u32::from_ne_bytes(b[12..16].try_into().expect("4 bytes")),
        })
    }
}

fn check(rc: i32) -> Result<()> {
    match rc {
        0 => Ok(()),
        // c/peer.c reports a failed work completion as -(1000 + status).
        rc if rc <= -1000 => Err(Error::InvalidArgument("the C peer saw a failed completion")),
        rc => Err(Error::Device(Errno(-rc))),
    }
}

extern "C" fn notify(ctx: *mut c_void) {
    // SAFETY: `ctx` is the `&Sender<()>` passed by `c_target`, alive for the whole call.
    let tx = unsafe { &*(ctx as *const Sender<()>) };
    let _ = tx.send(());
}

/// Run the C target on `ip:port`: accept one connection, let the writer fill `len` bytes and
/// end with a write with immediate. `listening` is signalled once it listens. Returns the
/// buffer's bytes and the immediate.
pub fn c_target(ip: &str, port: u16, len: u32, listening: Sender<()>) -> Result<(Vec<u8>, u32)> {
    let ip = CString::new(ip).map_err(|_| Error::InvalidArgument("ip contains NUL"))?;
    let port = CString::new(port.to_string()).expect("digits");
    let mut out = vec![0u8; len as usize];
    let mut imm = 0u32;
    // SAFETY: valid strings and an output buffer of `len` bytes; `notify` gets our sender.
    let rc = unsafe {
        ffi::rxe_peer_target(
            ip.as_ptr(),
            port.as_ptr(),
            out.as_mut_ptr(),
            len,
            &mut imm,
            notify,
            &listening as *const Sender<()> as *mut c_void,
        )
    };
    check(rc)?;
    Ok((out, imm))
}

/// Run the C writer: connect to `ip:port`, write `data` with one two-SGE `rdma_post_writev` to
/// where the accept's [`TargetInfo`] says, then send the 4-byte `token`.
pub fn c_writer(ip: &str, port: u16, data: &[u8], token: u32) -> Result<()> {
    let ip = CString::new(ip).map_err(|_| Error::InvalidArgument("ip contains NUL"))?;
    let port = CString::new(port.to_string()).expect("digits");
    let len = u32::try_from(data.len()).map_err(|_| Error::OutOfBounds)?;
    // SAFETY: valid strings and `len` readable bytes.
    check(unsafe { ffi::rxe_peer_writer(ip.as_ptr(), port.as_ptr(), data.as_ptr(), len, token) })
}

/// Which end of [`c_pingpong`] or [`c_writes`] to run.
#[derive(Clone, Debug)]
pub enum PingPongEnd {
    /// Listens on the address (signalling the sender once it does) and answers each write.
    Passive(Sender<()>),
    /// Connects, writes first and times each round trip.
    Active,
}

/// What one end of a control hands to `c/peer.c`: the address as C strings, whether it is the
/// active end, and the sender the passive end signals once it listens.
struct EndArgs {
    ip: CString,
    port: CString,
    active: bool,
    ready: Sender<()>,
}

impl EndArgs {
    fn new(ip: &str, port: u16, end: PingPongEnd) -> Result<EndArgs> {
        Ok(EndArgs {
            ip: CString::new(ip).map_err(|_| Error::InvalidArgument("ip contains NUL"))?,
            port: CString::new(port.to_string()).expect("digits"),
            active: matches!(end, PingPongEnd::Active),
            ready: match end {
                PingPongEnd::Passive(tx) => tx,
                PingPongEnd::Active => std::sync::mpsc::channel().0,
            },
        })
    }

    /// The `listening` context: our sender, alive as long as `self`.
    fn ctx(&self) -> *mut c_void {
        &self.ready as *const Sender<()> as *mut c_void
    }
}

/// Run both ends of a control on `ip:port` in this process: `run` with the passive end on a
/// second thread, then, once it listens (within `wait`), with the active end on this one.
/// Returns (passive, active).
pub fn both_ends<T, F>(ip: &str, port: u16, wait: std::time::Duration, run: F) -> Result<(T, T)>
where
    T: Send + 'static,
    F: Fn(&str, u16, PingPongEnd) -> Result<T> + Clone + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let (passive_ip, passive_run) = (ip.to_string(), run.clone());
    let passive =
        std::thread::spawn(move || passive_run(&passive_ip, port, PingPongEnd::Passive(tx)));
    rx.recv_timeout(wait).map_err(|_| Error::Timeout("the control's passive end to listen"))?;
    let active = run(ip, port, PingPongEnd::Active);
    let passive = passive.join().map_err(|_| Error::Device(Errno::EIO))?;
    Ok((passive?, active?))
}

/// Run one end of the C write ping-pong on `ip:port` (`rdma_post_write` of `size` bytes per
/// round, `iters` rounds, both ends polling the last byte of their buffer). The active end
/// returns each round trip's time, converted from the tick counter at the rate seen over the
/// whole run; the passive end returns an empty list.
pub fn c_pingpong(
    ip: &str,
    port: u16,
    end: PingPongEnd,
    size: u32,
    iters: u32,
) -> Result<Vec<std::time::Duration>> {
    let e = EndArgs::new(ip, port, end)?;
    let mut ticks = vec![0u64; if e.active { iters as usize } else { 0 }];
    let (mut run_ns, mut run_ticks) = (0u64, 0u64);
    // SAFETY: valid strings; `ticks` has room for `iters` entries on the active end (the only
    // one that writes them); `notify` gets our sender, alive for the whole call.
    let rc = unsafe {
        ffi::rxe_peer_pingpong(
            e.ip.as_ptr(),
            e.port.as_ptr(),
            e.active.into(),
            size,
            iters,
            ticks.as_mut_ptr(),
            &mut run_ns,
            &mut run_ticks,
            notify,
            e.ctx(),
        )
    };
    check(rc)?;
    let ns_per_tick = run_ns as f64 / run_ticks.max(1) as f64;
    Ok(ticks
        .iter()
        .map(|t| std::time::Duration::from_nanos((*t as f64 * ns_per_tick) as u64))
        .collect())
}

/// Run one end of the C stream of writes on `ip:port`: the active end keeps up to `depth`
/// `rdma_post_write`s of `size` bytes outstanding, signalling every `signal`-th and the last,
/// and returns the time from its first post to its last completion; the passive end is the
/// target and returns `None` once the writer says it is done.
pub fn c_writes(
    ip: &str,
    port: u16,
    end: PingPongEnd,
    size: u32,
    iters: u32,
    depth: u32,
    signal: u32,
) -> Result<Option<std::time::Duration>> {
    let e = EndArgs::new(ip, port, end)?;
    let mut run_ns = 0u64;
    // SAFETY: valid strings; `notify` gets our sender, alive for the whole call.
    let rc = unsafe {
        ffi::rxe_peer_writes(
            e.ip.as_ptr(),
            e.port.as_ptr(),
            e.active.into(),
            size,
            iters,
            depth,
            signal,
            &mut run_ns,
            notify,
            e.ctx(),
        )
    };
    check(rc)?;
    Ok(e.active.then(|| std::time::Duration::from_nanos(run_ns)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_info_round_trips_with_padding() {
        let t = TargetInfo { addr: 0x7f00_1234_5000, rkey: 0xabcd, len: 4096 };
        let mut wire = t.to_bytes().to_vec();
        wire.extend_from_slice(&[0; 40]);
        assert_eq!(TargetInfo::from_bytes(&wire).unwrap(), t);
        assert!(TargetInfo::from_bytes(&wire[..15]).is_err());
    }
}
