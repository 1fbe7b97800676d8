//! Big-endian field access on byte slices. Every mlx5 structure the model parses or builds
//! (send WQE segments, CQEs, doorbell records, doorbells) is big-endian on the wire and in
//! memory (PRM "Data Structures" conventions; rdma-core stores every field with `htobe*`).

/// The big-endian 16-bit field at `off`.
pub(crate) fn get16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

/// The big-endian 32-bit field at `off`.
pub(crate) fn get32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// The big-endian 64-bit field at `off`.
pub(crate) fn get64(b: &[u8], off: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[off..off + 8]);
    u64::from_be_bytes(w)
}

/// Store `v` big-endian at `off`.
pub(crate) fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

/// Store `v` big-endian at `off`.
pub(crate) fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

/// Store `v` big-endian at `off`.
pub(crate) fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_be_bytes());
}
