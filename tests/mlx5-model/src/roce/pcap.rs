//! Packet capture in the classic libpcap format, for Wireshark and tshark.
//!
//! Format (pcap-savefile(5); draft-ietf-opsawg-pcap): a 24-byte global header — magic
//! 0xa1b2c3d4 (microsecond timestamps) in the writer's byte order (little-endian here),
//! version 2.4, thiszone 0, sigfigs 0, snaplen, link type 1 (`LINKTYPE_ETHERNET`) — then
//! per frame a 16-byte record header (seconds, microseconds, captured length, original
//! length) and the frame. [`PcapTap`] wraps a port and records every frame sent and
//! received through it; several taps may share one [`PcapWriter`] to capture a whole hub.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::port::{Port, PortError};

/// The magic of a microsecond-resolution savefile.
pub const MAGIC_USEC: u32 = 0xa1b2_c3d4;
/// `LINKTYPE_ETHERNET`.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// The snapshot length written in the header; longer frames are cut to it.
pub const SNAPLEN: u32 = 65535;

/// A classic pcap writer.
pub struct PcapWriter<W: Write> {
    out: W,
    frames: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Write the global header to `out`.
    pub fn new(mut out: W) -> io::Result<PcapWriter<W>> {
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&MAGIC_USEC.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone (8..12) and sigfigs (12..16) stay 0.
        h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out, frames: 0 })
    }

    /// Record `frame` at `ts` since the Unix epoch.
    pub fn write_frame(&mut self, ts: Duration, frame: &[u8]) -> io::Result<()> {
        let cap = frame.len().min(SNAPLEN as usize);
        let mut r = [0u8; 16];
        r[0..4].copy_from_slice(&(ts.as_secs() as u32).to_le_bytes());
        r[4..8].copy_from_slice(&ts.subsec_micros().to_le_bytes());
        r[8..12].copy_from_slice(&(cap as u32).to_le_bytes());
        r[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out.write_all(&r)?;
        self.out.write_all(&frame[..cap])?;
        self.frames += 1;
        Ok(())
    }

    /// Record `frame` now.
    pub fn write_now(&mut self, frame: &[u8]) -> io::Result<()> {
        let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        self.write_frame(ts, frame)
    }

    /// Frames recorded.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Flush the output.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The output (flushed first).
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

impl PcapWriter<BufWriter<File>> {
    /// Create (or truncate) the file at `path` and write the header.
    pub fn create(path: impl AsRef<Path>) -> io::Result<PcapWriter<BufWriter<File>>> {
        PcapWriter::new(BufWriter::new(File::create(path)?))
    }
}

/// A writer several taps share.
pub type SharedPcap = Arc<Mutex<PcapWriter<BufWriter<File>>>>;

/// A port wrapper that records every frame sent and every frame received.
pub struct PcapTap<P: Port> {
    inner: P,
    pcap: SharedPcap,
    error: Option<io::ErrorKind>,
}

impl<P: Port> PcapTap<P> {
    /// Record `inner`'s traffic into `pcap`.
    pub fn new(inner: P, pcap: SharedPcap) -> PcapTap<P> {
        PcapTap { inner, pcap, error: None }
    }

    /// A writer for [`PcapTap::new`], created at `path`.
    pub fn shared(path: impl AsRef<Path>) -> io::Result<SharedPcap> {
        Ok(Arc::new(Mutex::new(PcapWriter::create(path)?)))
    }

    /// The first write error, if recording failed (the port keeps working).
    pub fn error(&self) -> Option<io::ErrorKind> {
        self.error
    }

    /// The inner port.
    pub fn inner_mut(&mut self) -> &mut P {
        &mut self.inner
    }

    fn record(&mut self, frame: &[u8]) {
        let mut w = self.pcap.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = w.write_now(frame).and_then(|_| w.flush()) {
            self.error.get_or_insert(e.kind());
        }
    }
}

impl<P: Port> Port for PcapTap<P> {
    fn send(&mut self, frame: &[u8]) -> Result<(), PortError> {
        self.record(frame);
        self.inner.send(frame)
    }

    fn recv(&mut self) -> Result<Option<Vec<u8>>, PortError> {
        let f = self.inner.recv()?;
        if let Some(f) = &f {
            self.record(f);
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_record_bytes() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_frame(Duration::new(0x0102_0304, 5_000_000), &[0xaa; 3]).unwrap();
        let b = w.into_inner().unwrap();
        assert_eq!(
            &b[..24],
            &[
                0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0,
                0, 0
            ]
        );
        assert_eq!(&b[24..40], &[4, 3, 2, 1, 0x88, 0x13, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0]);
        assert_eq!(&b[40..], &[0xaa; 3]);
    }
}
