//! The connection loop: receive a command, execute it, reply unless told not to.

use std::os::unix::net::UnixStream;

use crate::device::Device;
use crate::proto::{flags, Command, Errno};
use crate::sock::{self, RecvError};

/// Why serving stopped early: the connection's byte stream broke.
#[derive(Debug)]
pub enum Fatal {
    /// A message could not be received (framing).
    Recv(RecvError),
    /// A reply could not be sent.
    Send(std::io::Error),
}

impl std::fmt::Display for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fatal::Recv(e) => write!(f, "receive: {e}"),
            Fatal::Send(e) => write!(f, "send: {e}"),
        }
    }
}

/// Serve one connection until the client closes it (`Ok`) or the stream breaks. With `trace`,
/// one line per message on stderr.
pub fn serve(stream: &UnixStream, dev: &mut Device, trace: bool) -> Result<(), Fatal> {
    loop {
        let msg = match sock::recv(stream) {
            Ok(m) => m,
            Err(RecvError::Closed) => return Ok(()),
            Err(e) => return Err(Fatal::Recv(e)),
        };
        let h = msg.header;
        let command = Command::from(h.command);
        let no_reply = h.flags & flags::NO_REPLY != 0;
        // A reply, or a command with unknown flag bits, is not a command this server executes.
        let result = if h.flags & flags::TYPE_MASK != flags::TYPE_COMMAND
            || h.flags & !(flags::TYPE_MASK | flags::NO_REPLY) != 0
        {
            dev.stats.errors += 1;
            Err(Errno::EINVAL)
        } else {
            dev.handle(command, &msg.body, msg.fds)
        };
        if trace {
            match &result {
                Ok(p) => eprintln!(
                    "mlx5-vfio-user: #{} {command:?} {}B -> ok {}B{}",
                    h.id,
                    msg.body.len(),
                    p.len(),
                    if no_reply { " (no reply)" } else { "" }
                ),
                Err(e) => eprintln!(
                    "mlx5-vfio-user: #{} {command:?} {}B -> error {e}{}",
                    h.id,
                    msg.body.len(),
                    if no_reply { " (no reply)" } else { "" }
                ),
            }
        }
        if no_reply {
            if result.is_err() {
                dev.stats.unreplied_errors += 1;
            }
            continue;
        }
        let (reply, payload) = match &result {
            Ok(p) => (h.reply(Ok(p.len())), p.as_slice()),
            Err(e) => (h.reply(Err(*e)), &[][..]),
        };
        sock::send(stream, &reply, payload, &[]).map_err(Fatal::Send)?;
    }
}
