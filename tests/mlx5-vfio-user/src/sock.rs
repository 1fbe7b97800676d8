//! Messages over a UNIX stream socket, with file descriptors as `SCM_RIGHTS` ancillary data
//! (the spec: "On AF_UNIX sockets, the file descriptor must be passed as SCM_RIGHTS type
//! ancillary data"). The fds of a message travel with its first byte, so the header is
//! received with `recvmsg` and the rest of the message with plain reads.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use crate::proto::{Header, HDR_LEN, MAX_MSG, MAX_MSG_FDS};

/// One received message.
#[derive(Debug)]
pub struct Message {
    /// Its header.
    pub header: Header,
    /// The payload after the header.
    pub body: Vec<u8>,
    /// The fds that came with it (closed when dropped).
    pub fds: Vec<OwnedFd>,
}

/// Why no message could be read. Each is fatal for the connection: the byte stream cannot be
/// resynchronized after it.
#[derive(Debug)]
pub enum RecvError {
    /// The peer closed the connection between messages.
    Closed,
    /// The connection ended inside a message.
    Truncated {
        /// Bytes of the message that arrived.
        got: usize,
    },
    /// A header whose size is below the header's own or above [`MAX_MSG`].
    BadSize(u32),
    /// More fds than [`MAX_MSG_FDS`] (the kernel dropped the rest: `MSG_CTRUNC`).
    TooManyFds,
    /// The socket failed.
    Io(io::Error),
}

impl std::fmt::Display for RecvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecvError::Closed => write!(f, "connection closed"),
            RecvError::Truncated { got } => {
                write!(f, "connection closed inside a message ({got} bytes)")
            }
            RecvError::BadSize(s) => write!(f, "message size {s} out of range"),
            RecvError::TooManyFds => write!(f, "more than {MAX_MSG_FDS} fds in one message"),
            RecvError::Io(e) => write!(f, "socket: {e}"),
        }
    }
}

/// Control buffer for [`MAX_MSG_FDS`] fds, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct Control([u8; 128]);

/// Receive one message: its header with the fds that came with it, then the rest.
pub fn recv(stream: &UnixStream) -> Result<Message, RecvError> {
    let mut hdr = [0u8; HDR_LEN];
    let mut control = Control([0; 128]);
    // SAFETY: a constant argument; CMSG_SPACE only computes.
    let space = unsafe { libc::CMSG_SPACE((MAX_MSG_FDS * 4) as u32) } as usize;
    debug_assert!(space <= control.0.len());
    let mut iov = libc::iovec { iov_base: hdr.as_mut_ptr().cast(), iov_len: HDR_LEN };
    // SAFETY: all-zero is a valid msghdr (null name, no iovecs) before the fields are set.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    let n = loop {
        // SAFETY: `msg` points at `iov` (the header buffer, 16 bytes) and the control buffer
        // (`space` bytes), all of which outlive the call.
        let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(RecvError::Io(e));
        }
    };
    let fds = take_fds(&msg);
    if n == 0 {
        return Err(RecvError::Closed);
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(RecvError::TooManyFds);
    }
    read_full(stream, &mut hdr[n..], n)?;
    let header = Header::parse(&hdr);
    if (header.size as usize) < HDR_LEN || header.size > MAX_MSG {
        return Err(RecvError::BadSize(header.size));
    }
    let mut body = vec![0u8; header.size as usize - HDR_LEN];
    read_full(stream, &mut body, HDR_LEN)?;
    Ok(Message { header, body, fds })
}

/// The fds of every `SCM_RIGHTS` message in `msg`'s control data, owned.
fn take_fds(msg: &libc::msghdr) -> Vec<OwnedFd> {
    let mut fds = Vec::new();
    // SAFETY: `msg` was filled by `recvmsg`; the CMSG macros walk its control buffer within
    // `msg_controllen`.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !c.is_null() {
        // SAFETY: `c` is a header inside the control buffer (CMSG_FIRSTHDR/NXTHDR checked it).
        let h = unsafe { &*c };
        if h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: as above; CMSG_LEN only computes.
            let data_len = h.cmsg_len as usize - unsafe { libc::CMSG_LEN(0) } as usize;
            // SAFETY: the data of this header, inside the buffer.
            let data = unsafe { libc::CMSG_DATA(c) };
            for i in 0..data_len / 4 {
                // SAFETY: `i * 4 + 4 <= data_len`: an int inside the data, maybe unaligned.
                let fd: RawFd = unsafe { data.add(i * 4).cast::<RawFd>().read_unaligned() };
                // SAFETY: the kernel installed this fd for us with this message; nothing else
                // owns it.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
        // SAFETY: as for CMSG_FIRSTHDR.
        c = unsafe { libc::CMSG_NXTHDR(msg, c) };
    }
    fds
}

fn read_full(mut stream: &UnixStream, buf: &mut [u8], before: usize) -> Result<(), RecvError> {
    let mut got = 0;
    while got < buf.len() {
        match stream.read(&mut buf[got..]) {
            Ok(0) => return Err(RecvError::Truncated { got: before + got }),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(RecvError::Io(e)),
        }
    }
    Ok(())
}

/// Send `header` and `payload` as one message, with `fds` as `SCM_RIGHTS` on its first byte.
pub fn send(stream: &UnixStream, header: &Header, payload: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut bytes = Vec::with_capacity(HDR_LEN + payload.len());
    bytes.extend_from_slice(&header.emit());
    bytes.extend_from_slice(payload);
    if fds.len() > MAX_MSG_FDS {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut control = Control([0; 128]);
    let mut sent = 0;
    while sent < bytes.len() {
        let mut iov = libc::iovec {
            iov_base: bytes[sent..].as_mut_ptr().cast(),
            iov_len: bytes.len() - sent,
        };
        // SAFETY: all-zero is a valid msghdr before the fields are set.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if sent == 0 && !fds.is_empty() {
            let len = fds.len() * 4;
            // SAFETY: CMSG_SPACE/CMSG_LEN only compute.
            let (space, clen) =
                unsafe { (libc::CMSG_SPACE(len as u32), libc::CMSG_LEN(len as u32)) };
            msg.msg_control = control.0.as_mut_ptr().cast();
            msg.msg_controllen = space as _;
            // SAFETY: the control buffer holds `space` bytes (at most 16 fds), so the first
            // header and its data fit; the fds are copied byte-wise (unaligned is fine).
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = clen as _;
                std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), len);
            }
        }
        // SAFETY: `msg` points at live buffers of the stated sizes.
        let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        sent += n as usize;
    }
    Ok(())
}
