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
