//! A writer for the cpio `newc` format the kernel unpacks as an initramfs
//! (Linux `Documentation/driver-api/early-userspace/buffer-format.rst`): a 110-byte ASCII header
//! (`070701` and thirteen 8-digit hex fields), the NUL-terminated name padded to 4 bytes, the
//! data padded to 4 bytes, and a `TRAILER!!!` entry at the end. Every entry is owned by root.

use std::io::{self, Write};

/// Streams entries into `W`.
pub struct Writer<W: Write> {
    out: W,
    ino: u32,
    written: u64,
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;

impl<W: Write> Writer<W> {
    pub fn new(out: W) -> Self {
        Writer { out, ino: 1, written: 0 }
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) -> io::Result<()> {
        let name = name.trim_start_matches('/');
        let nlink = if mode & S_IFDIR != 0 { 2 } else { 1 };
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0,
            0,
            nlink,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        self.ino += 1;
        self.put(header.as_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&[0])?;
        self.pad()?;
        self.put(data)?;
        self.pad()
    }

    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.out.write_all(b)?;
        self.written += b.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> io::Result<()> {
        let n = (4 - (self.written % 4) as usize) % 4;
        self.put(&[0; 3][..n])
    }

    /// A directory (parents must come first).
    pub fn dir(&mut self, name: &str) -> io::Result<()> {
        self.entry(name, S_IFDIR | 0o755, &[])
    }

    /// A regular file with permission bits `perm`.
    pub fn file(&mut self, name: &str, perm: u32, data: &[u8]) -> io::Result<()> {
        self.entry(name, S_IFREG | (perm & 0o7777), data)
    }

    /// A symbolic link to `target`.
    pub fn symlink(&mut self, name: &str, target: &str) -> io::Result<()> {
        self.entry(name, S_IFLNK | 0o777, target.as_bytes())
    }

    /// Write the trailer and return the sink.
    pub fn finish(mut self) -> io::Result<W> {
        self.entry("TRAILER!!!", 0, &[])?;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newc_entries_are_padded_and_terminated() {
        let mut w = Writer::new(Vec::new());
        w.file("/init", 0o755, b"#!x\n").unwrap();
        let bytes = w.finish().unwrap();
        // Header of the first entry: magic, inode 1, mode 0100755, size 4, name size 5.
        let h = std::str::from_utf8(&bytes[..110]).unwrap();
        assert!(h.starts_with("070701"));
        assert_eq!(&h[6..14], "00000001");
        assert_eq!(&h[14..22], "000081ed");
        assert_eq!(&h[54..62], "00000004");
        assert_eq!(&h[94..102], "00000005");
        // 110 + "init\0" = 115, padded to 116; data 4 bytes.
        assert_eq!(&bytes[110..116], b"init\0\0");
        assert_eq!(&bytes[116..120], b"#!x\n");
        assert!(bytes[120..].starts_with(b"070701"));
        assert_eq!(bytes.len() % 4, 0);
        assert!(std::str::from_utf8(&bytes[120..]).unwrap().contains("TRAILER!!!"));
    }
}
