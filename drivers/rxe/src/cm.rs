//! Connection setup with librdmacm's synchronous endpoint API.
//!
//! Active side: [`Conn::resolve`] (`rdma_getaddrinfo` + `rdma_create_ep`, which resolves the
//! address and the route and binds the id to the RDMA device), then
//! [`RxeQp::connect`](crate::RxeQp::connect) (`rdma_connect`). Passive side: [`Listener::bind`]
//! (`rdma_create_ep` with `RAI_PASSIVE` + `rdma_listen`), [`Listener::get_request`]
//! (`rdma_get_request`), then [`RxeQp::accept`](crate::RxeQp::accept) (`rdma_accept`).
//!
//! The ids are synchronous (created without an event channel of our own), so each call returns
//! when its event has arrived; there is no event loop. Private data (up to 56 bytes on a
//! request, 196 on an accept for RoCE) carries what the peer needs to know, typically a
//! [`RemoteBuf`](rdma_pmd::RemoteBuf) and a length.

use core::ptr::{self, NonNull};
use std::ffi::CString;

use rdma_pmd::{Error, Gid, Result};

use crate::ffi;
use crate::last_errno;

/// One `rdma_cm_id` bound to an RDMA device: the owner of a connection's memory registrations
/// (they use the id's protection domain, as `rdma_reg_msgs` does) and of at most one queue pair.
///
/// Destroyed with `rdma_destroy_ep`, after every [`Region`](crate::Region) and
/// [`RxeQp`](crate::RxeQp) borrowing it.
#[derive(Debug)]
pub struct Conn {
    id: NonNull<ffi::rdma_cm_id>,
}

fn addrinfo(host: &str, port: u16, passive: bool) -> Result<*mut ffi::rdma_addrinfo> {
    let node = CString::new(host).map_err(|_| Error::InvalidArgument("host contains NUL"))?;
    let service = CString::new(port.to_string()).expect("digits");
    let hints = ffi::rdma_addrinfo {
        ai_flags: if passive { ffi::RAI_PASSIVE } else { 0 },
        ai_family: 0,
        ai_qp_type: 0,
        ai_port_space: ffi::RDMA_PS_TCP,
        ai_src_len: 0,
        ai_dst_len: 0,
        ai_src_addr: ptr::null_mut(),
        ai_dst_addr: ptr::null_mut(),
        ai_src_canonname: ptr::null_mut(),
        ai_dst_canonname: ptr::null_mut(),
        ai_route_len: 0,
        ai_route: ptr::null_mut(),
        ai_connect_len: 0,
        ai_connect: ptr::null_mut(),
        ai_next: ptr::null_mut(),
    };
    let mut res = ptr::null_mut();
    // SAFETY: valid C strings and hints; `res` receives a list we free after use.
    let rc = unsafe { ffi::rdma_getaddrinfo(node.as_ptr(), service.as_ptr(), &hints, &mut res) };
    if rc != 0 {
        return Err(last_errno());
    }
    Ok(res)
}

/// `rdma_create_ep` without a QP (ours is created later with our own completion queues).
fn create_ep(host: &str, port: u16, passive: bool) -> Result<NonNull<ffi::rdma_cm_id>> {
    let res = addrinfo(host, port, passive)?;
    let mut id = ptr::null_mut();
    // SAFETY: `res` came from rdma_getaddrinfo; a null PD and attributes ask for no QP.
    let rc = unsafe { ffi::rdma_create_ep(&mut id, res, ptr::null_mut(), ptr::null_mut()) };
    let err = last_errno();
    // SAFETY: `res` is not used after this.
    unsafe { ffi::rdma_freeaddrinfo(res) };
    if rc != 0 {
        return Err(err);
    }
    NonNull::new(id).ok_or(Error::Device(rdma_pmd::Errno::EIO))
}

impl Conn {
    /// Active side: resolve `host:port` to a device, an address and a route.
    pub fn resolve(host: &str, port: u16) -> Result<Conn> {
        Ok(Conn { id: create_ep(host, port, false)? })
    }

    pub(crate) fn id(&self) -> *mut ffi::rdma_cm_id {
        self.id.as_ptr()
    }

    pub(crate) fn verbs(&self) -> *mut ffi::ibv_context {
        // SAFETY: the id is live.
        unsafe { ffi::rxe_shim_id_verbs(self.id.as_ptr()) }
    }

    /// librdmacm's protection domain of the id's device (the one `rdma_reg_msgs` uses).
    pub(crate) fn pd(&self) -> *mut ffi::ibv_pd {
        // SAFETY: the id is live.
        unsafe { ffi::rxe_shim_id_pd(self.id.as_ptr()) }
    }

    /// The port of the device the id is bound to.
    pub fn port(&self) -> u8 {
        // SAFETY: the id is live.
        unsafe { ffi::rxe_shim_id_port(self.id.as_ptr()) }
    }

    /// Entry `index` of the port's GID table (`ibv_query_gid`). On RoCE v2 over IPv4 the
    /// netdev's address appears as an IPv4-mapped GID ([`Gid::ipv4`]); unused entries read as
    /// zero.
    pub fn gid(&self, index: u8) -> Result<Gid> {
        let mut raw = [0u8; 16];
        // SAFETY: a live context and a 16-byte output (`union ibv_gid`).
        let rc = unsafe { ffi::ibv_query_gid(self.verbs(), self.port(), index.into(), &mut raw) };
        if rc != 0 {
            return Err(last_errno());
        }
        Ok(Gid(raw))
    }

    /// The private data of the peer's last connection message: the request's (passive side,
    /// before accepting) or the accept's (active side, after connecting). Empty if none.
    pub fn peer_data(&self) -> Vec<u8> {
        let mut len = 0u8;
        // SAFETY: the id is live; the shim reads its current event.
        let p = unsafe { ffi::rxe_shim_id_private_data(self.id.as_ptr(), &mut len) };
        if p.is_null() {
            return Vec::new();
        }
        // SAFETY: librdmacm keeps `len` bytes at `p` until the id's next event.
        unsafe { core::slice::from_raw_parts(p.cast::<u8>(), len as usize) }.to_vec()
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // SAFETY: the id is live and nothing borrows it any more (regions and the QP borrow
        // `self`). rdma_destroy_ep also acknowledges a pending event.
        unsafe { ffi::rdma_destroy_ep(self.id.as_ptr()) }
    }
}

/// A listening id (`rdma_listen`).
#[derive(Debug)]
pub struct Listener {
    id: NonNull<ffi::rdma_cm_id>,
}

impl Listener {
    /// Passive side: bind `host:port` (an address of an RDMA-capable netdev) and listen.
    pub fn bind(host: &str, port: u16) -> Result<Listener> {
        let l = Listener { id: create_ep(host, port, true)? };
        // SAFETY: a bound id.
        if unsafe { ffi::rdma_listen(l.id.as_ptr(), 1) } != 0 {
            return Err(last_errno());
        }
        Ok(l)
    }

    /// Wait for one connection request (blocking, like `accept(2)`); the returned [`Conn`]
    /// carries the requester's private data until it is accepted.
    pub fn get_request(&self) -> Result<Conn> {
        let mut id = ptr::null_mut();
        // SAFETY: a listening synchronous id.
        if unsafe { ffi::rdma_get_request(self.id.as_ptr(), &mut id) } != 0 {
            return Err(last_errno());
        }
        Ok(Conn { id: NonNull::new(id).ok_or(Error::Device(rdma_pmd::Errno::EIO))? })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // SAFETY: the id is live and owned.
        unsafe { ffi::rdma_destroy_ep(self.id.as_ptr()) }
    }
}
